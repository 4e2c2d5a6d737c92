import numpy as np, torch, tilemm
from tilemm.data import operands
for kern in ["naive", "tiled", "regblock"]:
    for kind in ["numpy", "torch"]:
        a, b = operands(0, 17, 3, 0, "int32")
        if kind == "torch":
            a, b = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        c = tilemm.plan(a, b, kernel=kern).execute(poison=True)
        c = c.cpu().numpy() if kind == "torch" else c
        print(kern, kind, c[:, 0].tolist(), getattr(a, "stride", lambda: a.strides)())
