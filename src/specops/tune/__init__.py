"""specops tune: find the speculation profile that pays on this host (candidates, prediction, measurement)."""
