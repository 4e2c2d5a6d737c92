"""Past one GPU: host matrices larger than GPU memory (outofcore), several GPUs from one process (multi),
torch.distributed ranks (distributed, summa), DTensors (dtensor), and where a call goes (route)."""
