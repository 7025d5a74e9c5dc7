#!/bin/bash
# Stands in for scontrol in the health-check tests. Appends each call to
# FAKE_SCONTROL_LOG as one line, every argument in brackets:
#   [update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: gpu.count]
# `show node NAME` prints a node as scontrol does, in state FAKE_NODE_STATE
# [IDLE] with Reason FAKE_NODE_REASON [none]; FAKE_SCONTROL_FAIL=1 makes
# every call fail.
printf '[%s]' "$@" >> "${FAKE_SCONTROL_LOG:?}"
echo >> "$FAKE_SCONTROL_LOG"
if [[ ${FAKE_SCONTROL_FAIL:-0} == 1 ]]; then
  echo "slurm_load_node error: Unable to contact slurm controller (connect failure)" >&2
  exit 1
fi
if [[ ${1:-} == show && ${2:-} == node ]]; then
  cat << NODE
NodeName=$3 Arch=x86_64 CoresPerSocket=2
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.10
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:nvidia_h100_80gb_hbm3:8
   NodeAddr=$3 NodeHostName=$3 Version=22.05.8
   RealMemory=24105 AllocMem=0 FreeMem=22893 Sockets=1 Boards=1
   State=${FAKE_NODE_STATE:-IDLE} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug
   BootTime=2026-11-21T14:38:02 SlurmdStartTime=2026-11-21T23:39:59
NODE
  if [[ -n ${FAKE_NODE_REASON:-} ]]; then echo "   Reason=$FAKE_NODE_REASON [root@2026-11-21T23:47:39]"; fi
fi
exit 0
