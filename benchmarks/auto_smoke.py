import time, torch, tilemm
from tilemm import tuning
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
ref = a.double() @ b.double()
for i in range(2):
    t = time.perf_counter(); c = tilemm.matmul(a, b, kernel="auto"); torch.cuda.synchronize()
    print("auto call", i, f"{time.perf_counter() - t:.2f} s", "rel err", float((c.double() - ref).abs().max() / ref.abs().max()), dict(tuning.last))
