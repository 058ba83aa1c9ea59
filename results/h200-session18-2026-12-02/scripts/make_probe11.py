"""kernels/matmul_backward_dgelu/11_probe_no_library.cu on the device only: version 10 without its
cuBLASLt weight-gradient step, so racecheck runs our three kernels with no library kernel in the
process (its check fails on dweight by construction; only the sanitizer's verdict is read)."""
src = open("kernels/matmul_backward_dgelu/10_pingpong_dgelu_batched_loads.cu").read()
head, sep, body = src.partition("*/")
cut = head.rindex("[[launch]]\nlibrary")
head = head[:cut].replace('title = "bf16: version 9', 'title = "probe, never committed: version 9', 1)
open("kernels/matmul_backward_dgelu/11_probe_no_library.cu", "w").write(head + sep + body)
