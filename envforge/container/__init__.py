"""Pure facts about containers and images, shared by render, doctor and the Docker backend.

* :mod:`.refs`: image references, envforge's labels and certified repository names;
* :mod:`.caches`: the cache volumes and working directory a shell container gets;
* :mod:`.devices`: how GPUs reach a container (device flags) and ``--gpu`` selection;
* :mod:`.cdi`: Container Device Interface specs on this host;
* :mod:`.identity`: what an engine is (Docker or Podman, CDI, rootless) from its answers.

Nothing here talks to an engine: no ``docker`` SDK, nothing from :mod:`envforge.backends`
(``tests/unit/house/test_import_graph.py`` checks both). The Docker backend turns these values
into SDK calls (:func:`envforge.backends.docker.containers.sdk_kwargs`).
"""
