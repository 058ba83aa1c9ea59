"""kernels/matmul_backward_dgelu/10_probe_no_library.cu on the device only: version 8 without its
cuBLASLt weight-gradient step, so racecheck runs our three kernels with no library kernel in the
process (its check fails on dweight by construction; only the sanitizer's verdict is read)."""
src = open("kernels/matmul_backward_dgelu/8_pingpong_dgelu_epilogue.cu").read()
head, sep, body = src.partition("*/")
cut = head.rindex("[[launch]]\nlibrary")
head = head[:cut].replace('title = "bf16: our ping-pong', 'title = "probe, never committed: our ping-pong', 1)
open("kernels/matmul_backward_dgelu/10_probe_no_library.cu", "w").write(head + sep + body)
