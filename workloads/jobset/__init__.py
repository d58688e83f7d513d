"""The jobset backend: spec.py (config → inputs), manifests.py (pure builders), component.py, exports.py."""
