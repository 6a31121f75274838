#!/usr/bin/env bash
# Installs the Debian packages the tests and the local run need, only those missing.
# Safe to run again; does nothing when everything is present.
set -euo pipefail
pkgs=(
  openssh-server openssh-client iproute2 rsync procps   # sshd test hosts in network namespaces
  mmdebstrap                                             # pristine test hosts' image (tests/support/pristine.py)
  build-essential clang-16 make                          # native/ with gcc and clang
  clang-format-16                                        # make lint: native/'s format (native/.clang-format)
  libsimde-dev                                           # native/ AVX-512 kernels on SIMDe (test-only builds)
  likwid sysbench fio iperf3 numactl hwloc               # reference tools and platform suite
  chromium                                               # screenshot of the HTML report
  linux-perf linux-cpupower                              # perf_stat and clock_freq collectors (perf, turbostat)
  sqlite3
  python3-boto3                                          # platform S3 tools under Debian's python3 -I (tests/test_platform_host_tools.py)
  sudo                                                   # socketlab_become: orchestrate's agent via sudo -n (tests)
  cmake ninja-build                                      # llama-cpp-python[server] source build (serving tests)
  ethtool                                                # platform suite: combined queues (ethtool -l)
  linux-headers-amd64                                    # native/driver: Kbuild of pseudo_lock_sram.ko (tests/test_driver.py)
  patch                                                  # native/driver: the resctrl patch is checked with GNU patch
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "system-deps: missing Debian packages (install them as root): ${missing[*]}" >&2
  exit 1
fi
echo "system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
