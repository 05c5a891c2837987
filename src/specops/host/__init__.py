"""The code the deploy runs on its hosts, with the host's own ``python3`` and the standard library only: it runs
before the specops wheel is installed on a host, and on hosts where it never is (the builder, the load balancers).

Each module but hostlib (what they share, ``systemctl show`` included) is a script with a ``main``; the drain is
a package of small modules (``python3 ZIP drain`` runs its ``__main__``):

- ``host_facts``, ``disk_facts``: the first play's look at the host (API key file, ports, models; free disk);
- ``unit_state``, ``wait_healthy``, ``drain``, ``probe``, ``speed_probe``: the service's restart, health wait,
  proof and speed gate (roles/llama_server, roles/systemd_unit);
- ``deploy_lock`` (roles/deploy_lock), ``build_progress`` (roles/llama_cpp), ``haproxy_admin`` (roles/loadbalancer).

They import the standard library, each other and :mod:`specops.keyfile` (the one reader of API key files) and
nothing else (tests/unit/test_host_code.py walks their imports). The deploy ships them as one zip that the host's
python3 runs, ``python3 host-scripts-ID.pyz drain ARGS`` (:mod:`specops.hostzip`, built on the controller by
roles/specops_package/tasks/host_scripts.yml); where specops is installed, ``python -m specops.host drain ARGS`` is the
same."""
