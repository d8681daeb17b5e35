"""Evidence of what ran where: probe reports and certificates read as records
(``records``), the local store and database (``evidence_store``, ``evidence_db``),
the certified-on site (``matrix``, ``certified_on``), ``--summary`` Markdown
(``summary``) and redaction of host details (``redact``)."""
