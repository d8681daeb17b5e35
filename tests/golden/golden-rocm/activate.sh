# envforge recipe golden-rocm (stack torch1.13.1-rocm5.2-py3.10): the recipe's environment.
# Source this after the venv's bin/activate. Generated: do not edit.
export HSA_OVERRIDE_GFX_VERSION=10.3.0
export MIOPEN_DEBUG_CONV_IMPLICIT_GEMM=1
export EXAMPLE_QUOTING='a "quoted" $VALUE with \ and '"'"'single'"'"' quotes'
