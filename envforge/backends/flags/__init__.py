"""Each backend's flags in a module of their own, named by the backends' registry:
a command line is parsed without importing a backend it does not use."""
