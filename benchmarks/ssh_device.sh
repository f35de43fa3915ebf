#!/usr/bin/env bash
# `gpufleet check -i INVENTORY` over real OpenSSH against the lent GPU machine itself, which has
# no sshd: Debian 12's openssh-server, unpacked with dpkg -x (the .debs travel in .sshdeb, see
# benchmarks/README.md "Over SSH on the GPU machine"), listens on 127.0.0.2:2222; the controller
# (paramiko, strict host-key checking against a known_hosts file written here) logs in as root
# with a key made here, exactly as against a fleet host. Usage, on the device, from the repo root:
#   bash benchmarks/ssh_device.sh PREFIX      # e.g. 2026-12-02-nvidia-h200-s6-ssh
# Needs $OUT and the wheels in .whl (ansible-core for the inventory, paramiko); writes
# PREFIX-check-{facts,full}.json, PREFIX-check-full.txt and PREFIX-session.log under $OUT.
set -uo pipefail
P=${1:?prefix}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/$P-session.log") 2>&1
date -u; echo "tree: ${GPUFLEET_COMMIT:-the working tree sent}"
if [ -n "${GPUFLEET_PY:-}" ]; then  # a dry run elsewhere: that interpreter has the packages
  PY=$GPUFLEET_PY; export PYTHONPATH=$PWD/agent
else
  PY=/opt/torch/.venv/bin/python3
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit
  export PYTHONPATH=$PWD/agent:/tmp/site
fi
R=/tmp/gf-sshroot W=/tmp/gf-ssh
rm -rf "$R" "$W"; mkdir -p "$R" "$W" /run/sshd; chmod 755 /run/sshd
for f in .sshdeb/*.deb; do
  case $f in *libssl3*) dpkg -x "$f" "$R/ssl" ;; *) dpkg -x "$f" "$R" ;; esac
done
LIBS=$R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu
id sshd >/dev/null 2>&1 || useradd -r -d /run/sshd -s /usr/sbin/nologin sshd  # privsep user
keygen() { LD_LIBRARY_PATH=$LIBS "$R/usr/bin/ssh-keygen" -q -t ed25519 -N '' -C "$2" -f "$1"; }
keygen "$W/host_key" host && keygen "$W/client_key" controller || exit
cp "$W/client_key.pub" "$W/authorized_keys"
printf '[127.0.0.2]:2222 %s\n' "$(cut -d' ' -f1,2 "$W/host_key.pub")" >"$W/known_hosts"
cat >"$W/sshd_config" <<EOF
ListenAddress 127.0.0.2:2222
HostKey $W/host_key
PidFile $W/sshd.pid
AuthorizedKeysFile $W/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
EOF
SSHD_LIBS=$LIBS
if ! LD_LIBRARY_PATH=$SSHD_LIBS "$R/usr/sbin/sshd" -t -f "$W/sshd_config"; then
  SSHD_LIBS=$LIBS:$R/ssl/usr/lib/x86_64-linux-gnu  # the system's libssl refused: Debian's
  LD_LIBRARY_PATH=$SSHD_LIBS "$R/usr/sbin/sshd" -t -f "$W/sshd_config" || exit
fi
LD_LIBRARY_PATH=$SSHD_LIBS "$R/usr/sbin/sshd" -D -f "$W/sshd_config" -E "$W/sshd.log" &
SSHD=$!
trap 'kill $SSHD 2>/dev/null; wait $SSHD 2>/dev/null' EXIT
for _ in $(seq 50); do grep -q "Server listening" "$W/sshd.log" 2>/dev/null && break; sleep 0.1; done
LD_LIBRARY_PATH=$SSHD_LIBS "$R/usr/sbin/sshd" -V 2>&1 | head -1
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
mkdir -p "$W/inv/group_vars"
cat >"$W/inv/hosts.yml" <<EOF
all:
  children:
    gpu:
      hosts:
        lent-h200:
          ansible_host: 127.0.0.2
          ansible_port: 2222
EOF
cat >"$W/inv/group_vars/all.yml" <<EOF
ansible_user: root
ansible_ssh_private_key_file: $W/client_key
ansible_ssh_common_args: -o UserKnownHostsFile=$W/known_hosts
gpufleet_smoke_python: $PY
gpufleet_expected_gpu_count: $NGPU
nvidia_driver_version: "$DRIVER"
EOF
export HOME=$W  # no ~/.ssh of the machine's: the inventory's key and known_hosts only
elapsed() { python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$1"; }
gf() { "$PY" -m gpufleet "$@"; }
t0=$(date +%s.%N); gf check -i "$W/inv" --level facts --format json -o "$OUT/$P-check-facts.json"
echo "check -i over ssh, facts: exit=$? wall_s=$(elapsed "$t0")"
t0=$(date +%s.%N); gf check -i "$W/inv" --level full --format json -o "$OUT/$P-check-full.json"
echo "check -i over ssh, full: exit=$? wall_s=$(elapsed "$t0")"
gf report "$OUT/$P-check-full.json" --format table >"$OUT/$P-check-full.txt"; cat "$OUT/$P-check-full.txt"
# A host key that is not the one known_hosts holds is refused, as OpenSSH refuses it.
keygen "$W/other_key" other || exit
printf '[127.0.0.2]:2222 %s\n' "$(cut -d' ' -f1,2 "$W/other_key.pub")" >"$W/known_hosts"
gf check -i "$W/inv" --level facts --format json -o "$W/refused.json"
echo "changed host key: exit=$? $("$PY" -c 'import json,sys; h=json.load(open(sys.argv[1]))["hosts"]; print([(n, v.get("status"), str(v.get("error"))[:160]) for n, v in h.items()])' "$W/refused.json")"
grep -c "Accepted publickey" "$W/sshd.log" | sed 's/^/sshd accepted logins: /'
date -u
