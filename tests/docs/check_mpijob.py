#!/usr/bin/python3
"""check_mpijob.py - examples/k8s/mpijob.yaml is an MPIJob the Kubeflow MPI Operator accepts and
a job hvdcrun can run; no cluster can run it here (examples/k8s/README.md says so).

The schema's required fields and types are those of the operator's CRD for kubeflow.org/v2beta1
(deploy/v2beta1/mpi-operator.yaml in kubeflow/mpi-operator): spec.mpiReplicaSpecs (Launcher,
Worker); each replica's template.spec.containers; a name on every container, volume and volume
mount (and a mountPath); enumerations for mpiImplementation, restartPolicy, cleanPodPolicy;
integers where the CRD says int32. hvdcrun's rules: the launcher runs hvdcrun on the
operator's hostfile with -np = slotsPerWorker x Worker replicas; with --gpu every worker asks
for slotsPerWorker GPUs; every mounted volume is declared. --self-test: each rule catches a
planted mistake.

Usage: check_mpijob.py FILE.yaml [--self-test]     (python3-yaml)
"""
import copy
import sys

import yaml

HOSTFILE = "/etc/mpi/hostfile"  # where the operator writes it (v2beta1)


def need(cond, problems, what):
    if not cond:
        problems.append(what)
    return cond


def check_pod(where, template, problems):
    spec = (template or {}).get("spec")
    if not need(isinstance(spec, dict), problems, where + ".template.spec: required"):
        return
    containers = spec.get("containers")
    need(isinstance(containers, list) and containers, problems,
         where + ".template.spec.containers: required, a non-empty list")
    volumes = {v.get("name") for v in spec.get("volumes", []) or []}
    for v in spec.get("volumes", []) or []:
        need(isinstance(v.get("name"), str), problems, where + ": a volume without a name")
    for i, c in enumerate(containers or []):
        at = "%s.containers[%d]" % (where, i)
        need(isinstance(c.get("name"), str) and c["name"], problems, at + ".name: required")
        need(isinstance(c.get("image"), str) and c["image"], problems, at + ".image: required")
        for m in c.get("volumeMounts", []) or []:
            need(isinstance(m.get("name"), str) and isinstance(m.get("mountPath"), str),
                 problems, at + ".volumeMounts: name and mountPath are required")
            need(m.get("name") in volumes, problems,
                 "%s mounts volume '%s', which the pod does not declare" % (at, m.get("name")))


def check_schema(job, problems):
    need(job.get("apiVersion") == "kubeflow.org/v2beta1", problems,
         "apiVersion: expected kubeflow.org/v2beta1, got %r" % job.get("apiVersion"))
    need(job.get("kind") == "MPIJob", problems, "kind: expected MPIJob")
    need(isinstance((job.get("metadata") or {}).get("name"), str), problems,
         "metadata.name: required")
    spec = job.get("spec")
    if not need(isinstance(spec, dict), problems, "spec: required"):
        return
    need(isinstance(spec.get("slotsPerWorker", 1), int), problems, "slotsPerWorker: an integer")
    need(spec.get("mpiImplementation", "OpenMPI") in ("OpenMPI", "Intel", "MPICH"), problems,
         "mpiImplementation: OpenMPI, Intel or MPICH")
    need((spec.get("runPolicy") or {}).get("cleanPodPolicy", "Running") in
         ("None", "Running", "All"), problems, "runPolicy.cleanPodPolicy: None, Running or All")
    replicas = spec.get("mpiReplicaSpecs")
    if not need(isinstance(replicas, dict), problems, "spec.mpiReplicaSpecs: required"):
        return
    need(set(replicas) == {"Launcher", "Worker"}, problems,
         "spec.mpiReplicaSpecs: expected Launcher and Worker, got %s" % sorted(replicas))
    for role, r in replicas.items():
        where = "mpiReplicaSpecs.%s" % role
        need(isinstance(r.get("replicas", 1), int), problems, where + ".replicas: an integer")
        need(r.get("restartPolicy", "Never") in ("Always", "OnFailure", "Never", "ExitCode"),
             problems, where + ".restartPolicy: Always, OnFailure, Never or ExitCode")
        check_pod(where, r.get("template"), problems)
    need((replicas.get("Launcher") or {}).get("replicas", 1) == 1, problems,
         "mpiReplicaSpecs.Launcher.replicas: must be 1")


def check_hvdcrun(job, problems):
    """The launcher's command is an hvdcrun line that fits the workers."""
    spec = job["spec"]
    replicas = spec["mpiReplicaSpecs"]
    slots = spec.get("slotsPerWorker", 1)
    workers = replicas["Worker"].get("replicas", 1)
    c = replicas["Launcher"]["template"]["spec"]["containers"][0]
    line = list(c.get("command", [])) + list(c.get("args", []))
    if not need(line and line[0].endswith("/hvdcrun"), problems,
                "the launcher's command is not hvdcrun: %s" % line[:1]):
        return
    opt = {line[i]: line[i + 1] for i in range(len(line) - 1) if line[i].startswith("-")}
    need(opt.get("--hostfile") == HOSTFILE, problems,
         "hvdcrun --hostfile: expected the operator's %s" % HOSTFILE)
    need(opt.get("-np") == str(slots * workers), problems, "hvdcrun -np %s: expected %d "
         "(slotsPerWorker %d x %d workers)" % (opt.get("-np"), slots * workers, slots, workers))
    if "--gpu" in line:
        for w in replicas["Worker"]["template"]["spec"]["containers"]:
            gpus = ((w.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
            need(gpus == slots, problems, "--gpu: worker '%s' asks for %r GPUs, not "
                 "slotsPerWorker (%d)" % (w.get("name"), gpus, slots))


def problems_of(job):
    problems = []
    check_schema(job, problems)
    if not problems:
        check_hvdcrun(job, problems)
    return problems


def self_test(job):
    """Each planted mistake must be caught."""
    def worker(j):
        return j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    launcher_args = lambda j: j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][  # noqa
        "containers"][0]["args"]
    plants = {
        "no mpiReplicaSpecs": lambda j: j["spec"].pop("mpiReplicaSpecs"),
        "no containers": lambda j: worker(j).pop("containers"),
        "a container without a name": lambda j: worker(j)["containers"][0].pop("name"),
        "a mount of an undeclared volume": lambda j: worker(j).pop("volumes"),
        "a wrong apiVersion": lambda j: j.update(apiVersion="kubeflow.org/v1"),
        "-np not slots x workers": lambda j: j["spec"].update(slotsPerWorker=3),
        "GPUs per worker not the slots": lambda j: worker(j)["containers"][0]["resources"][
            "limits"].update({"nvidia.com/gpu": 1}),
        "another hostfile": lambda j: launcher_args(j).__setitem__(
            launcher_args(j).index("--hostfile") + 1, "/tmp/hosts"),
    }
    missed = []
    for what, plant in plants.items():
        j = copy.deepcopy(job)
        plant(j)
        if not problems_of(j):
            missed.append(what)
    return missed


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: check_mpijob.py FILE.yaml [--self-test]")
    with open(sys.argv[1]) as f:
        job = yaml.safe_load(f)
    if "--self-test" in sys.argv[2:]:
        missed = self_test(job)
        print("FAIL: not caught: %s" % ", ".join(missed) if missed else
              "PASS: every planted mistake was caught")
        return 1 if missed else 0
    problems = problems_of(job)
    for p in problems:
        print("FAIL: %s: %s" % (sys.argv[1], p))
    if not problems:
        print("PASS: %s is an MPIJob (kubeflow.org/v2beta1) hvdcrun can run" % sys.argv[1])
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
