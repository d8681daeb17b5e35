# envforge recipe golden-cuda (stack torch2.6.0-cu126-py3.12): the recipe's environment.
# Source this after the venv's bin/activate. Generated: do not edit.
export NCCL_DEBUG=WARN
