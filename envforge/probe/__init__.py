"""The timed, isolated hardware probe: worker (stdlib only), runner, reports, select_device.

The ``worker`` package runs inside the environment under test, shipped as one file
(``bundle.py``); everything else runs on the host.
This ``__init__`` imports nothing, so importing one probe module (the target contract,
which the audit uses) loads no sibling.
"""
