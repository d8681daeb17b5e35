"""Fleet certification: one plan, run by the scheduler a site already has.

The pipeline on a fleet reads as on one host, spread over nodes:

* :mod:`.plan` -- recipes x archs -> a frozen :class:`~.plan.Plan` (``plan.json``): which
  recipe (or image) is certified on which arch, on how many nodes, one task per node;
* :mod:`.slurm`, :mod:`.k8s`, :mod:`.github` -- the engines (:class:`.base.Engine`, named
  by :data:`.engines.ENGINES`, the one way commands reach them): the plan as the engine's
  own files (sbatch job arrays; Kubernetes Jobs; a GitHub Actions matrix), handing it over
  and what the scheduler still queues (Slurm's submit and queue);
* :mod:`envforge.host.grant` -- on a node: the GPUs the scheduler granted, in the node's
  numbering (``SLURM_JOB_GPUS``) and the job's (``CUDA_VISIBLE_DEVICES``,
  ``ROCR_VISIBLE_DEVICES``: from 0 under ConstrainDevices);
* :mod:`.task` -- one task: ``envforge build``/``certify`` with ``--report`` into the
  plan's ``reports/NNN/`` folder, and ``task.json`` (exit status, node, granted GPUs);
* :mod:`.values` -- what each value may be (Slurm, Kubernetes, GitHub) and its quoting;
* :mod:`.outcome` -- each task's state from its report folder and the queue, and the
  checks ``fleet collect`` makes (the report is about the planned recipe hash or image,
  is shaped like a real probe run and carries the plan's nonce for its task).

Everything here but :mod:`.slurm`'s submit/queue and :mod:`.task` is pure: it writes no
file and starts no process (the CLI, :mod:`envforge.cli.fleet`, writes the files).
"""
