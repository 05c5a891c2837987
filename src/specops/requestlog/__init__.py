"""Task files from a request log (``specops tasks --from-requests``): read OpenAI-style chat bodies, label their
workloads, sample them into the bench's task format. Nothing here prints or logs prompt text: only ids, workloads,
lengths and counts (a request log is the operator's, and may hold secrets)."""
