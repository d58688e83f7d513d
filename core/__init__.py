"""The pure domain: TPU catalog and Kubernetes TPU vocabulary, model presets, memory model, planner, MaxText
facts and argv, libtpu environment. No Pulumi, Ray or JAX at import: shipped to the cluster with trainer/."""
