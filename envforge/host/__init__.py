"""The host envforge runs on: GPU and driver detection (``detect``, tool-output
parsers in ``detect_parse``, the one host model in ``hostinfo``), bounded sysfs/procfs
reads (``hostfs``), GPU arch facts (``arch``), wheel and image platforms
(``platforms``) and ``doctor``'s findings."""
