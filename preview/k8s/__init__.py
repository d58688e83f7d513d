"""Independent validation of the Kubernetes objects the stack would apply: schemas, CRDs and webhook rules."""
