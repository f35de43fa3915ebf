import json,subprocess as sp,sys,time,torch
N=8192;o={};F="--format=csv,noheader,nounits";Q="uuid,clocks_event_reasons.active,clocks.sm,clocks.max.sm,power.draw,power.limit,power.default_limit,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,mig.mode.current,memory.used,memory.total"
A="gpu_uuid,pid,process_name,used_memory"
H={"matmul":"a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\nw=lambda:a@a","mem":"x=torch.empty(int(torch.cuda.mem_get_info()[0]*.8),dtype=torch.uint8,device='cuda');x.fill_(1)\nw=lambda:time.sleep(.2)","copy":"h=torch.empty(1<<30,dtype=torch.uint8,pin_memory=True);d=torch.empty(1<<30,dtype=torch.uint8,device='cuda')\nw=lambda:(d.copy_(h,non_blocking=True),h.copy_(d,non_blocking=True))"}
E=lambda:torch.cuda.Event(enable_timing=True)
def T(f,r):
 e=E();g=E();e.record()
 for _ in range(r):f()
 g.record();g.synchronize();return e.elapsed_time(g)/1e3
def smi(q):return sp.run(["nvidia-smi",q,F],capture_output=True,text=True).stdout
for s in ["healthy","matmul","mem","copy"]:
 p=None
 if s in H:
  p=sp.Popen([sys.executable,"-c","import torch,time\n"+H[s]+"\nw();torch.cuda.synchronize();print('ready',flush=True)\nwhile 1:\n w();torch.cuda.synchronize()"],stdout=sp.PIPE,text=True);p.stdout.readline()
 r={};a=torch.randn(N,N,device="cuda",dtype=torch.bfloat16);b=a.clone()
 for _ in range(50):a@b
 x=sp.Popen(["nvidia-smi","--query-gpu="+Q,F],stdout=sp.PIPE,text=True)
 while x.poll() is None:a@b
 torch.cuda.synchronize()
 r["sample_gpu"]=x.stdout.read();r["sample_apps"]=smi("--query-compute-apps="+A)
 for d in ["bf16","fp16","tf32","fp32","fp8"]:
  torch.backends.cuda.matmul.allow_tf32=d=="tf32";t={"bf16":torch.bfloat16,"fp16":torch.float16}.get(d,torch.float32)
  a=torch.randn(N,N,device="cuda",dtype=t);b=torch.randn(N,N,device="cuda",dtype=t);f=lambda:a@b
  if d=="fp8":
   o1=torch.tensor(1.,device="cuda");a8=a.to(torch.float8_e4m3fn);b8=b.to(torch.float8_e4m3fn).t();f=lambda:torch._scaled_mm(a8,b8,scale_a=o1,scale_b=o1,out_dtype=torch.bfloat16)
  for _ in range(3):f()
  torch.cuda.synchronize();r[d]=2*N**3*20/T(f,20)/1e12
 del a,b;torch.cuda.empty_cache();u=torch.ones(1<<30,dtype=torch.uint8,device="cuda");v=torch.empty_like(u);v.copy_(u)
 r["hbm_one_side"]=(1<<30)*20/T(lambda:v.copy_(u),20)/1e9;del u,v
 h=torch.empty(1<<30,dtype=torch.uint8,pin_memory=True);g=torch.empty(1<<30,dtype=torch.uint8,device="cuda");g.copy_(h)
 r["h2d"]=(1<<30)*10/T(lambda:g.copy_(h),10)/1e9;r["d2h"]=(1<<30)*10/T(lambda:h.copy_(g),10)/1e9;del h,g;torch.cuda.empty_cache()
 if p:p.kill();p.wait()
 o[s]=r;print(s,r.get("bf16"),flush=True)
json.dump(o,open(sys.argv[1],"w"),indent=1)
