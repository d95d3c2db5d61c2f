"""Layer 3, the outside world: the Pulumi engine, AWS, Kubernetes, HAProxy and files. Imports components/ and
stacks/, never automation.service or automation.cli."""
