"""`python -m automation sandbox`: the hub's pieces a laptop can run, on loopback, for the getting-started docs.

A supervisor process (`sandbox run`; `sandbox up` starts it detached) runs a real etcd + kube-apiserver +
kube-controller-manager (`apiserver.py`), moto as the AWS endpoint (`aws.py`, when moto's server is installed) and,
with `--forge`, a real Gitea (`gitea.py`); `supervisor.py` starts and stops them, `folder.py` is its state folder,
`command.py` the command line. Nothing here is imported by the service: it sits beside the service, the API, the
runner and the console (pyproject.toml's layers).
"""
