# Admission of an envforge-attested image, for `cosign verify-attestation --policy`:
# cosign has already checked the DSSE signature with --key and the subject against the
# image's manifest digest; `input` is one in-toto Statement. Admit it only when it records
# a pass on the node's arch (NODE_ARCH: its GPUs' arch, "cpu" without a GPU).
package signature

import rego.v1

node_arch := "gfx1031"

default allow := false

# the archs the certifying host had ("cpu" for a host without a GPU)
archs contains gpu.arch if {
	some gpu in input.predicate.host.gpus
	gpu.arch
}

archs contains "cpu" if {
	count([g | some g in input.predicate.host.gpus; g.arch]) == 0
}

allow if {
	input._type == "https://in-toto.io/Statement/v1"
	input.predicateType == "https://envforge.dev/certification/v1"
	input.predicate.result in {"PASSED", "WARNED"}
	node_arch in archs
}
