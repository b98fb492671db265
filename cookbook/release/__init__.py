"""An image released: the refusals and the push, the registry, SBOM and provenance, Kubernetes manifests and
KServe's schema.

May import: host, recipe, image, prove, fixpack. tests/test_layout.py holds the direction."""
