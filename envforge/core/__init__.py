"""Shared plumbing every stage uses: processes with deadlines (``proc``), atomic
writes and file-system errors (``fsutil``), the one YAML reader (``yamlcheck``) and
JSON decoder (``jsonlimits``), the one URL opener (``net``), index mirrors
(``mirror``), state paths (``paths``), shipped files (``resources``), deferred imports
(``lazy``) and the shared input patterns (``patterns``)."""
