"""Certificates and publishing: the certificate format and store (``certificate``),
ed25519 signatures (``signing``), pushing and verifying certified images (``push``)
and image labels over the registry HTTP API (``registry``)."""
