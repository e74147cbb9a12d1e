#!/usr/bin/env bash
# A one-node Slurm on this machine (Debian's slurm-wlm: slurmctld + slurmd on localhost, with
# slurmdbd on MariaDB so that sacct answers, as on a real cluster), for the tests that submit
# a study to it (tests/test_cluster.py). Needs root and apt; about a minute. Exit 0 once
# `sinfo` shows the node idle.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mysqld >/dev/null; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client slurmdbd munge mariadb-server
fi

host=$(hostname)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))  # MiB, leave some to the system
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /run/munge /run/mysqld /var/log
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=ci
SlurmctldHost=$host
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd.log
# no cgroups in a container: track processes by parentage, bind nothing
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# one core per task by default: tasks of an array run side by side on the node's cores
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
MpiDefault=none
ReturnToService=2
MinJobAge=3600
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat > /etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=ci
StorageLoc=slurm_acct_db
LogFile=/var/log/slurmdbd.log
PidFile=/run/slurmdbd.pid
EOF
chmod 600 /etc/slurm/slurmdbd.conf

# daemons, each started only if not running
chown munge:munge /run/munge
pgrep -x munged >/dev/null || su -s /bin/sh munge -c munged || munged --force
chown mysql:mysql /run/mysqld
if ! mysqladmin ping >/dev/null 2>&1; then
  (mysqld_safe --user=mysql >/var/log/mysqld-ci.log 2>&1 &)
  for _ in $(seq 60); do mysqladmin ping >/dev/null 2>&1 && break; sleep 1; done
fi
mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'ci';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
pgrep -x slurmdbd >/dev/null || slurmdbd
for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
sacctmgr -i add cluster ci >/dev/null 2>&1 || true
pgrep -x slurmctld >/dev/null && scontrol reconfigure || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 60); do
  if [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ]; then sinfo; exit 0; fi
  sleep 1
done
echo "slurm did not come up:" >&2
tail -n 20 /var/log/slurmctld.log /var/log/slurmd.log /var/log/slurmdbd.log >&2 || true
exit 1
