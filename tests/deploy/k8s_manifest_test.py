#!/usr/bin/env python3
"""deploy/k8s/dtrain-job.yaml: it parses, carries the fields an Indexed Job
with a headless Service needs, and the `dtrain launch` flags agree with the
Job (node count = completions, GPUs = the GPU limit, node 0's DNS name, node
rank = completion index, store port = Service port). Broken copies of the
manifest show that each check can fail.

    k8s_manifest_test.py MANIFEST DTRAIN_BINARY
"""
import copy
import subprocess
import sys
import unittest

import yaml

MANIFEST = None
DTRAIN = None
INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def flag(command, name):
    """The value after `name` in the dtrain launch part of `command`, or None."""
    launch = command.index("launch")
    for i in range(launch + 1, len(command) - 1):
        if command[i] == name:
            return command[i + 1]
        if command[i] == name.replace("-", "_"):
            return command[i + 1]
    return None


def problems(docs):
    """Everything wrong with the manifest's documents, as sentences."""
    found = []
    by_kind = {}
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            found.append("a document without a kind: %r" % (doc,))
            continue
        by_kind.setdefault(doc["kind"], []).append(doc)
    if len(by_kind.get("Service", [])) != 1 or len(by_kind.get("Job", [])) != 1:
        return found + ["expected one Service and one Job, found %s" %
                        {k: len(v) for k, v in by_kind.items()}]
    service, job = by_kind["Service"][0], by_kind["Job"][0]
    svc_name, job_name = service["metadata"]["name"], job["metadata"]["name"]
    svc_spec, job_spec = service["spec"], job["spec"]

    if svc_spec.get("clusterIP") != "None":
        found.append("Service is not headless (clusterIP: None)")
    if svc_spec.get("publishNotReadyAddresses") is not True:
        found.append("Service does not publish not-ready pods (publishNotReadyAddresses: true)")
    if job_spec.get("completionMode") != "Indexed":
        found.append("Job completionMode is not Indexed")
    completions, parallelism = job_spec.get("completions"), job_spec.get("parallelism")
    if not isinstance(completions, int) or completions < 1 or completions != parallelism:
        found.append("Job completions (%r) and parallelism (%r) differ or are not >= 1" % (completions, parallelism))
    if not isinstance(job_spec.get("backoffLimit"), int) or job_spec["backoffLimit"] < 1:
        found.append("Job backoffLimit is not >= 1: restarts of a pod would fail the Job")

    template = job_spec["template"]
    pod = template["spec"]
    labels = template.get("metadata", {}).get("labels", {})
    for key, value in svc_spec.get("selector", {}).items():
        if labels.get(key) != value:
            found.append("Service selector %s=%s does not match the pod labels %r" % (key, value, labels))
    if not svc_spec.get("selector"):
        found.append("Service has no selector")
    if pod.get("subdomain") != svc_name:
        found.append("pod subdomain %r is not the Service name %r" % (pod.get("subdomain"), svc_name))
    if pod.get("restartPolicy") not in ("OnFailure", "Never"):
        found.append("pod restartPolicy %r is not OnFailure or Never (a Job needs one)" % pod.get("restartPolicy"))

    containers = pod.get("containers", [])
    launchers = [c for c in containers if c.get("command", [])[:2] == ["dtrain", "launch"]]
    if len(launchers) != 1:
        return found + ["expected one container running `dtrain launch`, found %d" % len(launchers)]
    container = launchers[0]
    command = [str(word) for word in container["command"] + container.get("args", [])]

    nnodes = flag(command, "--nnodes")
    if nnodes is None or nnodes.split(":")[-1] != str(completions) or nnodes.split(":")[0] != str(completions):
        found.append("--nnodes %r is not the Job's completions %r" % (nnodes, completions))
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if gpus is None:
        found.append("the container has no nvidia.com/gpu limit")
    if flag(command, "--nproc-per-node") != str(gpus):
        found.append("--nproc-per-node %r is not the GPU limit %r" % (flag(command, "--nproc-per-node"), gpus))
    node0 = "%s-0.%s" % (job_name, svc_name)
    master = flag(command, "--master-addr") or (flag(command, "--rdzv-endpoint") or "").split(":")[0]
    if master != node0:
        found.append("rendezvous host %r is not node 0's pod DNS name %r" % (master, node0))
    port = flag(command, "--master-port")
    svc_ports = [p.get("port") for p in svc_spec.get("ports", [])]
    if port is None or int(port) not in svc_ports:
        found.append("--master-port %r is not a Service port %r" % (port, svc_ports))
    if port is not None and int(port) not in [p.get("containerPort") for p in container.get("ports", [])]:
        found.append("--master-port %r is not a containerPort" % port)

    rank = flag(command, "--node-rank")
    env = {e["name"]: e for e in container.get("env", [])}
    if rank is None or not (rank.startswith("$(") and rank.endswith(")")):
        found.append("--node-rank %r is not an environment variable $(NAME)" % rank)
    else:
        var = env.get(rank[2:-1], {})
        field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field != INDEX_ANNOTATION and rank[2:-1] != "JOB_COMPLETION_INDEX":
            found.append("--node-rank %s is not the Job's completion index (fieldPath %r)" % (rank, field))

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    shm = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == "/dev/shm"]
    if not shm or volumes.get(shm[0]["name"], {}).get("emptyDir", {}).get("medium") != "Memory":
        found.append("/dev/shm is not an emptyDir with medium Memory")
    return found


def load(path):
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


class ManifestTest(unittest.TestCase):
    def setUp(self):
        self.docs = load(MANIFEST)

    def job(self, docs):
        return next(d for d in docs if d["kind"] == "Job")

    def container(self, docs):
        return self.job(docs)["spec"]["template"]["spec"]["containers"][0]

    def test_manifest_has_no_problems(self):
        self.assertEqual(problems(self.docs), [])

    def broken(self, change):
        docs = copy.deepcopy(self.docs)
        change(docs)
        return problems(docs)

    def set_flag(self, docs, name, value):
        command = self.container(docs)["command"]
        command[command.index(name) + 1] = value

    def test_each_disagreement_is_found(self):
        cases = [
            (lambda d: self.job(d)["spec"].update(completions=3, parallelism=3), "--nnodes '2' is not the Job's"),
            (lambda d: self.job(d)["spec"].update(parallelism=1), "completions (2) and parallelism (1) differ"),
            (lambda d: self.job(d)["spec"].pop("completionMode"), "completionMode is not Indexed"),
            (lambda d: self.job(d)["spec"]["template"]["spec"].update(subdomain="other"), "is not the Service name"),
            (lambda d: self.job(d)["spec"]["template"]["spec"].update(restartPolicy="Always"), "restartPolicy"),
            (lambda d: self.set_flag(d, "--nproc-per-node", "4"), "is not the GPU limit"),
            (lambda d: self.set_flag(d, "--master-addr", "dtrain-1.dtrain"), "is not node 0's pod DNS name"),
            (lambda d: self.set_flag(d, "--master-port", "29400"), "is not a Service port"),
            (lambda d: self.set_flag(d, "--node-rank", "0"), "is not an environment variable"),
            (lambda d: self.container(d)["env"][0]["valueFrom"]["fieldRef"].update(fieldPath="metadata.name"),
             "is not the Job's completion index"),
            (lambda d: self.container(d)["resources"]["limits"].pop("nvidia.com/gpu"), "no nvidia.com/gpu limit"),
            (lambda d: d[0]["spec"].update(clusterIP="10.0.0.1"), "not headless"),
            (lambda d: d[0]["spec"].pop("publishNotReadyAddresses"), "publishNotReadyAddresses"),
            (lambda d: d[0]["spec"]["selector"].update({"app.kubernetes.io/instance": "x"}), "does not match"),
            (lambda d: self.job(d)["spec"]["template"]["spec"]["volumes"][0]["emptyDir"].pop("medium"),
             "/dev/shm is not an emptyDir"),
            (lambda d: d.pop(0), "expected one Service and one Job"),
        ]
        for change, message in cases:
            found = self.broken(change)
            self.assertTrue(any(message in p for p in found), "%r not in %r" % (message, found))

    def test_launch_flags_are_dtrain_launch_flags(self):
        help_text = subprocess.run([DTRAIN, "launch", "--help"], capture_output=True, text=True, timeout=30).stdout
        command = self.container(self.docs)["command"]
        script = command.index("dtrain", 1)  # the workers' program: flags before it are the launcher's
        flags = [word for word in command[2:script] if str(word).startswith("--")]
        self.assertIn("--node-rank", flags)
        for name in flags:
            self.assertIn("  " + name + " ", help_text, "dtrain launch has no flag " + name)

    def test_unparsable_yaml_is_an_error(self):
        with self.assertRaises(yaml.YAMLError):
            list(yaml.safe_load_all("kind: Job\n  spec: [unclosed\n"))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: k8s_manifest_test.py MANIFEST DTRAIN_BINARY")
    MANIFEST = sys.argv.pop(1)
    DTRAIN = sys.argv.pop(1)
    unittest.main(verbosity=2)
