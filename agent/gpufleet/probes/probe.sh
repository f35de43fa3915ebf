#!/bin/sh
# gpufleet probe: every fact of one host in one round trip.
# Run as `sh -s -- [tool_timeout=SECONDS] [image=REF]` with this text on stdin.
# POSIX sh; needs only coreutils (timeout, mktemp, readlink, tail, date, uname, cat, df; awk for
# the free space, which is left unknown without it).
# Output: sections `==gpufleet== NAME rc=N`, the tool's stdout, and, when the tool wrote to
# stderr, a `==gpufleet-stderr==` line followed by it. rc 127 = tool not found,
# 124/137 = the tool hung and was killed by `timeout`. Parsing happens on the controller.
# GPUFLEET_PROC_DRIVER_NVIDIA points /proc/driver/nvidia elsewhere, GPUFLEET_SYS_PCI_DEVICES
# /sys/bus/pci/devices, GPUFLEET_SYS_CLASS_INFINIBAND /sys/class/infiniband, GPUFLEET_SYS_CLASS_NET
# /sys/class/net, GPUFLEET_BOOT /boot, GPUFLEET_REBOOT_REQUIRED /var/run/reboot-required,
# GPUFLEET_SYS_MODULE /sys/module, GPUFLEET_SYS_KERNEL_MM /sys/kernel/mm and
# GPUFLEET_BOOT_ID /proc/sys/kernel/random/boot_id; only tests set them.

LC_ALL=C
export LC_ALL
# Appended, not prepended: the caller's PATH order wins (/usr/local/sbin first for root).
PATH="$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export PATH

tool_timeout=10
image=
for arg in "$@"; do
    case $arg in
        tool_timeout=*) tool_timeout=${arg#tool_timeout=} ;;
        image=*) image=${arg#image=} ;;
    esac
done
case $tool_timeout in '' | *[!0-9.]*) tool_timeout=10 ;; esac
pdn=${GPUFLEET_PROC_DRIVER_NVIDIA:-/proc/driver/nvidia}
pci=${GPUFLEET_SYS_PCI_DEVICES:-/sys/bus/pci/devices}
ib=${GPUFLEET_SYS_CLASS_INFINIBAND:-/sys/class/infiniband}
boot=${GPUFLEET_BOOT:-/boot}
reboot_flag=${GPUFLEET_REBOOT_REQUIRED:-/var/run/reboot-required}
net=${GPUFLEET_SYS_CLASS_NET:-/sys/class/net}
sysmod=${GPUFLEET_SYS_MODULE:-/sys/module}
sysmm=${GPUFLEET_SYS_KERNEL_MM:-/sys/kernel/mm}
boot_id=${GPUFLEET_BOOT_ID:-/proc/sys/kernel/random/boot_id}

# Without mktemp: a new directory of our own (mkdir without -p fails on anything already there,
# a planted symlink included), private from the start (umask), never one someone else made.
tmp=$(mktemp -d 2>/dev/null) || {
    tmp=${TMPDIR:-/tmp}/gpufleet-probe.$$
    (umask 077 && mkdir "$tmp") 2>/dev/null && [ -d "$tmp" ] && [ ! -L "$tmp" ] && [ -O "$tmp" ] || {
        echo "gpufleet probe: cannot create a private temporary directory ($tmp exists or" \
            "cannot be made)" >&2
        exit 91
    }
}
trap 'rm -rf "$tmp"' EXIT
# A full /tmp still makes directories (no data blocks) but no file content: every tool's output
# would vanish and read as "absent". Say so (tmpdir section: the path and its free KiB) and go
# on in the first directory that takes a write, so the facts are still read.
tmp_base=${TMPDIR:-/tmp}
tmp_free=$(df -Pk "$tmp_base" 2>/dev/null | awk 'NR == 2 { print $4 }')
tmp_used=
if ! { printf 'gpufleet-write-test\n' >"$tmp/w"; } 2>/dev/null || [ ! -s "$tmp/w" ]; then
    tmp_used=none
    for d in /dev/shm "$HOME"; do
        t=$(mktemp -d -p "$d" 2>/dev/null) || continue
        if { printf 'gpufleet-write-test\n' >"$t/w"; } 2>/dev/null && [ -s "$t/w" ]; then
            rm -rf "$tmp"
            tmp=$t tmp_used=$d
            break
        fi
        rm -rf "$t"
    done
    if [ "$tmp_used" = none ]; then  # nothing could be read: an error, never "absent" facts
        echo "gpufleet probe: no space for temporary files: $tmp_base has ${tmp_free:-?} KiB" \
            "free (No space left on device), and neither /dev/shm nor \$HOME takes a write" >&2
        exit 92
    fi
fi
trap 'exit 143' TERM HUP INT

# Kill a hung tool with TERM, then KILL 2 s later (-k), where this timeout supports it.
if command -v timeout >/dev/null 2>&1; then
    if timeout -k 1 5 true >/dev/null 2>&1; then
        to="timeout -k 2 $tool_timeout"
    else
        to="timeout $tool_timeout"
    fi
else
    to=
fi

emit() {  # emit NAME RC: print a section from $tmp/out and $tmp/err
    printf '==gpufleet== %s rc=%s\n' "$1" "$2"
    if [ -s "$tmp/out" ]; then
        cat "$tmp/out"
        [ -n "$(tail -c 1 "$tmp/out")" ] && echo
    fi
    if [ -s "$tmp/err" ]; then
        echo '==gpufleet-stderr=='
        cat "$tmp/err"
        [ -n "$(tail -c 1 "$tmp/err")" ] && echo
    fi
    return 0
}

capture() {  # capture ARGV...: run one tool under timeout into $tmp/out, $tmp/err; sets rc
    : >"$tmp/out"
    : >"$tmp/err"
    if ! command -v "$1" >/dev/null 2>&1; then
        printf '%s: not found\n' "$1" >"$tmp/err"
        rc=127
        return
    fi
    $to "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
}

section() {  # section NAME ARGV...
    name=$1
    shift
    capture "$@"
    emit "$name" "$rc"
}

# After one nvidia-smi call hangs, the others would hang too: skip them so the
# rest of the host's facts still arrive well within the caller's timeout.
smi_hung=
smi() {  # smi NAME ARGS...
    name=$1
    shift
    if [ -n "$smi_hung" ]; then
        : >"$tmp/out"
        echo 'skipped: nvidia-smi hung earlier in this probe' >"$tmp/err"
        emit "$name" 124
        return
    fi
    capture nvidia-smi "$@"
    case $rc in 124 | 137) smi_hung=1 ;; esac
    emit "$name" "$rc"
}

printf '==gpufleet== meta rc=0\nprobe_version=1\ntool_timeout=%s\ndate=%s\nimage=%s\n' \
    "$tool_timeout" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$image"
printf '==gpufleet== tmpdir rc=0\npath=%s\nfree_kib=%s\nfallback=%s\n' \
    "$tmp_base" "$tmp_free" "$tmp_used"

if [ -r /etc/os-release ]; then
    section os_release cat /etc/os-release
else
    section os_release cat /usr/lib/os-release
fi
section uname uname -r -m
# A random UUID the kernel draws at every boot: runs with different ids are different boots.
section boot_id cat "$boot_id"
# Installed kernels (/boot/vmlinuz-RELEASE) and the distribution's reboot flag: `vmlinuz RELEASE`
# lines, `boot=absent` when /boot is not a directory, `reboot-required` when the flag exists.
{
    if [ -d "$boot" ]; then
        for f in "$boot"/vmlinuz-*; do
            [ -f "$f" ] && printf 'vmlinuz %s\n' "${f##*/vmlinuz-}"
        done
    else
        echo boot=absent
    fi
    [ -e "$reboot_flag" ] && echo reboot-required
} >"$tmp/out" 2>/dev/null </dev/null
: >"$tmp/err"
emit kernels 0
section proc_driver_version cat "$pdn/version"

# The exact fields of the 580 capture; an unknown field fails the whole query (exit 2),
# so an older driver gets a second query with long-standing field names only.
q_fields=index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,persistence_mode,mig.mode.current,ecc.mode.current,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active,compute_cap,serial
smi query_gpu "--query-gpu=$q_fields" --format=csv
if [ "$rc" = 2 ] && [ -z "$smi_hung" ]; then
    smi query_gpu_basic --query-gpu=index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,persistence_mode,ecc.mode.current,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_throttle_reasons.active --format=csv
fi
smi nvidia_smi_q -q
smi topo topo -m
smi nvlink nvlink -s
smi nvlink_errors nvlink -e
smi compute_apps --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid --format=csv

# Only the NVIDIA libraries are kept; `ldconfig -p` lists every library of the host.
capture ldconfig -p
if [ "$rc" = 0 ]; then
    while IFS= read -r line; do
        case $line in
            *libnccl.so* | *libnvidia-ml.so* | *libcuda.so*) printf '%s\n' "$line" ;;
        esac
    done <"$tmp/out" >"$tmp/libs"
    for lib in libnccl.so.2 libnvidia-ml.so.1; do
        while IFS= read -r line; do
            case $line in
                *"$lib "*"=> "*)
                    path=${line##*=> }
                    printf 'resolved %s => %s\n' "$path" "$(readlink -f "$path" 2>/dev/null)"
                    break
                    ;;
            esac
        done <"$tmp/libs"
    done >>"$tmp/libs"
    mv "$tmp/libs" "$tmp/out"
fi
emit ldconfig "$rc"

# Kernel log: the NVIDIA driver's Xid lines only, with their facility (-x: util-linux
# sys-utils/dmesg.c print_record writes "%-6s:%-6s: " facility and level first), ISO times when
# dmesg can, else journald's kernel-facility records (SYSLOG_FACILITY=0: systemd
# src/journal/journald-kmsg.c dev_kmsg_record sets it from the record's own priority). A line is
# kept only where the kernel message itself starts with "NVRM: Xid (": a segfault report quoting a
# user's file name, or user text written to /dev/kmsg (facility user: the kernel's devkmsg_write
# never lets user space claim kern), is counted, never kept, so it can neither forge an Xid nor
# push a real one out of the newest 500 kept. probes/kernel_log.py parses the same layout.
capture dmesg -x --time-format iso
src='dmesg -x --time-format iso'
if [ "$rc" != 0 ]; then
    capture dmesg -x
    src='dmesg -x'
fi
if [ "$rc" != 0 ] && command -v journalctl >/dev/null 2>&1; then
    capture journalctl -k -o short-iso --no-pager -q --since=-7d SYSLOG_FACILITY=0
    src=journalctl
fi
if [ "$rc" = 0 ]; then
    {
        echo "# source: $src"
        # journald's short-iso puts "HOST kernel: " between the time and the message.
        awk -v keep=500 -v journal="$([ "$src" = journalctl ] && echo 1)" '
            {
                rest = $0; fac = ""
                if (match(rest, /^[a-z0-9]+ *:[a-z]+ *: /)) {
                    fac = substr(rest, 1, index(rest, ":") - 1); sub(/ +$/, "", fac)
                    rest = substr(rest, RLENGTH + 1)
                }
                if (journal) {
                    if (match(rest, /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[^ ]+ [^ ]+ kernel: /))
                        rest = substr(rest, RLENGTH + 1)
                } else if (match(rest, /^\[ *[0-9.]+\] /) ||
                           match(rest, /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[^ ]+ /))
                    rest = substr(rest, RLENGTH + 1)
                if (index(rest, "NVRM: Xid (") == 1 && (fac == "" || fac == "kern")) {
                    n++; line[n % keep] = $0
                } else if (index($0, "NVRM: Xid") > 0) other++
            }
            END {
                old = n > keep ? n - keep : 0
                printf "# skipped: %d not from the driver, %d older than the newest %d\n", other, old, keep
                for (i = old + 1; i <= n; i++) print line[i % keep]
            }' <"$tmp/out"
    } >"$tmp/klog"
    mv "$tmp/klog" "$tmp/out"
fi
emit kernel_log "$rc"

# NVSwitch hosts: fabric manager service, and the switches themselves (PCI class 0680).
{
    if command -v nv-fabricmanager >/dev/null 2>&1; then
        echo "installed=$(command -v nv-fabricmanager)"
    fi
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        echo "systemd=$($to systemctl is-active nvidia-fabricmanager 2>/dev/null)"
    fi
    if command -v pgrep >/dev/null 2>&1; then
        echo "pgrep=$($to pgrep -x nv-fabricmanager 2>/dev/null | tr '\n' ' ')"
    fi
} >"$tmp/fm" 2>/dev/null </dev/null
: >"$tmp/err"
mv "$tmp/fm" "$tmp/out"
emit fabric_manager 0
section lspci lspci -n -d 10de:

# NVIDIA (vendor 0x10de) VGA (class 0x0300xx) and 3D (0x0302xx) controllers the kernel sees,
# from sysfs and without any tool, so a GPU the driver no longer enumerates still shows.
# Lines: ADDRESS CLASS DEVICE (sysfs prints each as 0x-hex: drivers/pci/pci-sysfs.c).
{
    if [ -d "$pci" ]; then
        for d in "$pci"/*; do
            [ -r "$d/vendor" ] && [ -r "$d/class" ] || continue
            read -r vendor <"$d/vendor" && [ "$vendor" = 0x10de ] || continue
            read -r class <"$d/class" || continue
            case $class in 0x0300?? | 0x0302??) ;; *) continue ;; esac
            device=
            [ -r "$d/device" ] && read -r device <"$d/device"
            printf '%s %s %s\n' "${d##*/}" "$class" "$device"
        done
    else
        echo 'sysfs=absent'
    fi
} >"$tmp/out" 2>/dev/null </dev/null
: >"$tmp/err"
emit pci_gpus 0

# RDMA ports (InfiniBand, RoCE) and their link rates, from sysfs: DEVICE PORT RATE per line,
# RATE as the kernel prints ports/N/rate ("400 Gb/sec (4X NDR)"); nothing when no RDMA device.
{
    for f in "$ib"/*/ports/*/rate; do
        [ -r "$f" ] || continue
        p=${f%/rate}; dev=${p%/ports/*}
        read -r rate <"$f" || continue
        printf '%s %s %s\n' "${dev##*/}" "${p##*/}" "$rate"
    done
} >"$tmp/out" 2>/dev/null </dev/null
: >"$tmp/err"
emit ib_ports 0

# Each RDMA port's health (probes/ib.py has the layout and its sources): `port DEVICE PORT`, then
# `KEY VALUE` lines: state, phys_state, link_layer, `counter NAME N`, `hw_counter NAME N`, the
# non-zero `pkey INDEX 0x....`, gid0, and for RoCE the netdev of GID 0 with its carrier_changes.
{
    for p in "$ib"/*/ports/*; do
        [ -d "$p" ] || continue
        dev=${p%/ports/*}
        printf 'port %s %s\n' "${dev##*/}" "${p##*/}"
        for a in state phys_state link_layer; do
            [ -r "$p/$a" ] && read -r v <"$p/$a" && printf '%s %s\n' "$a" "$v"
        done
        for kind in counters hw_counters; do
            for f in "$p/$kind"/*; do
                [ -f "$f" ] && read -r v <"$f" && printf '%s %s %s\n' "${kind%s}" "${f##*/}" "$v"
            done
        done
        for f in "$p"/pkeys/*; do
            [ -f "$f" ] && read -r v <"$f" && [ "$v" != 0x0000 ] && printf 'pkey %s %s\n' "${f##*/}" "$v"
        done
        [ -r "$p/gids/0" ] && read -r v <"$p/gids/0" && printf 'gid0 %s\n' "$v"
        nd=
        [ -r "$p/gid_attrs/ndevs/0" ] && read -r nd <"$p/gid_attrs/ndevs/0"
        case $nd in
            '' | */* | .*) ;;
            *) printf 'netdev %s\n' "$nd"
               [ -r "$net/$nd/carrier_changes" ] && read -r v <"$net/$nd/carrier_changes" &&
                   printf 'carrier_changes %s\n' "$v" ;;
        esac
    done
} >"$tmp/out" 2>/dev/null </dev/null
: >"$tmp/err"
emit ib_links 0

# mlxlink's BER of each RDMA device with an ACTIVE port (probes/ib.py has the format's source):
# `device DEV rc=N`, then each line it printed prefixed `> ` (so a host line cannot pass for a
# `device` line); `mlxlink=absent` without the tool. The devices are asked at once (mlxlink
# reads several registers per call: about a second), so 8 HCAs cost one call's time, not 8.
{
    if command -v mlxlink >/dev/null 2>&1; then
        devs=
        for f in "$ib"/*/ports/*/state; do
            [ -r "$f" ] && read -r v <"$f" || continue
            case $v in *ACTIVE) ;; *) continue ;; esac
            d=${f%/ports/*}; d=${d##*/}
            case $d in '' | -* | *[!A-Za-z0-9_.:-]*) continue ;; esac
            case " $devs " in *" $d "*) continue ;; esac
            devs="$devs $d"
            { $to mlxlink -d "$d" -c >"$tmp/ml.$d" 2>&1 </dev/null; echo "$?" >"$tmp/rc.$d"; } &
        done
        wait
        for d in $devs; do
            read -r v <"$tmp/rc.$d" || v=?
            printf 'device %s rc=%s\n' "$d" "$v"
            n=0
            while IFS= read -r l && [ "$n" -lt 200 ]; do
                printf '> %s\n' "$l"
                n=$((n + 1))
            done <"$tmp/ml.$d"
        done
    else
        echo mlxlink=absent
    fi
} >"$tmp/out" 2>/dev/null </dev/null
: >"$tmp/err"
emit mlxlink 0

# GPUDirect RDMA's kernel paths (probes/gdr.py has the sources): `module NAME VERSION` for each
# peer-memory or RDMA core module sysfs lists, `memory_peer NAME VERSION` for each peer-memory
# client registered with ib_core (/sys/kernel/mm/memory_peers, MLNX_OFED's API); VERSION is the
# module's own version file, empty where it has none.
{
    for m in nvidia_peermem nv_peer_mem ib_core ib_uverbs; do
        [ -d "$sysmod/$m" ] || continue
        v=
        [ -r "$sysmod/$m/version" ] && read -r v <"$sysmod/$m/version"
        printf 'module %s %s\n' "$m" "$v"
    done
    for d in "$sysmm"/memory_peers/*; do
        [ -d "$d" ] || continue
        v=
        [ -r "$d/version" ] && read -r v <"$d/version"
        printf 'memory_peer %s %s\n' "${d##*/}" "$v"
    done
} >"$tmp/out" 2>/dev/null </dev/null
: >"$tmp/err"
emit gdr 0

section toolkit nvidia-ctk --version
section docker_info docker info --format '{"ServerVersion":{{json .ServerVersion}},"DefaultRuntime":{{json .DefaultRuntime}},"Runtimes":{{json .Runtimes}},"RuncCommit":{{json .RuncCommit}},"Authz":{{json .Plugins.Authorization}}}'
section containerd containerd --version
if [ -n "$image" ]; then
    # Two lines: the RepoDigests, then the image's Env (what every container of it starts with).
    capture docker image inspect --format '{{json .RepoDigests}}
env={{json .Config.Env}}' -- "$image"
    emit image "$rc"
fi

# NCCL's configuration as a process started over this ssh session sees it: probe_script()
# puts gpufleet/probes/nccl.py's SHELL on the next line when the probe is built (one copy).
{
#@include nccl.SHELL
} >"$tmp/out" 2>/dev/null </dev/null
: >"$tmp/err"
emit nccl_conf 0

# Running containers (settings only: of Env only NVIDIA_VISIBLE_DEVICES, picked by the template
# on the host, since Env may hold secrets; it decides the GPUs under the nvidia runtime), then, inside each
# workspace container (label gpufleet.workspace, made by the pytorch_workspace role), what its
# Jupyter answers without a token, what its running sshd accepts and which uid Jupyter runs as.
ctr_format='{"Id":{{json .Id}},"Name":{{json .Name}},"Image":{{json .Config.Image}},"Labels":{{json .Config.Labels}},"User":{{json .Config.User}},"Running":{{json .State.Running}},"Memory":{{json .HostConfig.Memory}},"NanoCpus":{{json .HostConfig.NanoCpus}},"DeviceRequests":{{json .HostConfig.DeviceRequests}},"PortBindings":{{json .HostConfig.PortBindings}},"Runtime":{{json .HostConfig.Runtime}},"GpuEnv":[{{range .Config.Env}}{{if eq (index (split . "=") 0) "NVIDIA_VISIBLE_DEVICES"}}{{json .}},{{end}}{{end}}null]}'
# gpufleet/probes/ws_check.py, put here as a shell-quoted string when the probe is built, so
# the probe stays one command; it runs inside each workspace container (python3 -I -c, as the
# workspace's uid).
#@include ws_check.py
capture docker ps -q --no-trunc
if [ "$rc" = 0 ] && [ -s "$tmp/out" ]; then
    ids=$(tr -cd '0-9a-f\n' <"$tmp/out" | tr '\n' ' ')
    # shellcheck disable=SC2086  # ids: hex only, split on purpose
    capture docker inspect --format "$ctr_format" -- $ids
    emit containers "$rc"
    capture docker ps -q --no-trunc --filter label=gpufleet.workspace
    wids=$(tr -cd '0-9a-f\n' <"$tmp/out" | tr '\n' ' ')
    : >"$tmp/wsc"
    for id in $wids; do
        capture docker inspect --format '{{index .Config.Labels "gpufleet.workspace.jupyter"}}
{{index .Config.Labels "gpufleet.workspace.uid"}}
{{index .Config.Labels "gpufleet.workspace.sshd"}}' -- "$id"
        jp=$(sed -n 1p "$tmp/out" | tr -cd '0-9')
        wuid=$(sed -n 2p "$tmp/out" | tr -cd '0-9')
        sshd=$(sed -n 3p "$tmp/out" | tr -cd 'A-Za-z0-9/._-')
        # As the workspace's uid (nobody for a container without one), never root: the check
        # must not hand a tenant root, nor read what a tenant planted on sys.path (-I).
        case $wuid in '' | 0) wuid=65534 ;; esac
        capture docker exec --user "$wuid:$wuid" -w / "$id" python3 -I -c "$ws_check" "$jp" "$sshd"
        { printf 'container=%s rc=%s\n' "$id" "$rc"; cat "$tmp/out"; echo; } >>"$tmp/wsc"
        capture docker top "$id" -eo pid
        printf 'pids=%s\n' "$(tr -cd '0-9\n' <"$tmp/out" | tr '\n' ' ')" >>"$tmp/wsc"
    done
    : >"$tmp/err"
    mv "$tmp/wsc" "$tmp/out"
    emit workspace_checks 0
fi

printf '==gpufleet== end rc=0\n'
