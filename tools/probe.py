import time, torch, os, ctypes
t=time.time(); print("cuda avail", torch.cuda.is_available(), time.time()-t)
t=time.time(); print("cap", torch.cuda.get_device_capability(), time.time()-t)
x=torch.tensor([-0.0,0.0,float('nan'),-1.,2.],device='cuda', requires_grad=True)
for dt in [torch.float32, torch.bfloat16, torch.float16, torch.float64]:
    y=torch.relu(x.detach().to(dt)); print(dt, y, torch.signbit(y).tolist())
y=torch.relu(x); y.backward(torch.ones_like(y)); print(x.grad)
print(torch.nn.functional.elu(x.detach()), torch.signbit(torch.nn.functional.elu(x.detach())).tolist())
try:
    nv=ctypes.CDLL("libnvidia-ml.so.1"); print("nvml ok")
except OSError as e: print("nvml", e)
print(torch.__version__, torch.version.cuda)
import torch.utils.cpp_extension as ce; print(ce.CUDA_HOME)
