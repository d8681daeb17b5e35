# envforge recipe golden-cpu (stack torch2.13.0-cpu-py3.11): the recipe's environment.
# Source this after the venv's bin/activate. Generated: do not edit.
