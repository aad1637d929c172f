#!/usr/bin/env python3
"""deploy/kubernetes/*.yaml, checked without a cluster.

tfjob.yaml (Kubeflow TFJob): renders the TF_CONFIG the training operator injects into
every replica (keys: the lower-cased replica types; hosts <job>-<type>-<i>.<namespace>.svc
:<tfjob-port>; "environment": "cloud") and runs the matching daemon from the build tree
with the container's command and args plus --check-config: each must accept it as that
task. The same for the legacy replica type "Master" (read as the chief). It also checks
restartPolicy ExitCode everywhere and the shared model-dir volume.

serve.yaml (pstrain-serve's Deployment and Service): the container's command and args
with the ConfigMap's model config (its /models paths moved into a temp dir holding a model
dir) pass pstrain-serve's --check-config; the readiness probe asks the status of a model
the config serves on the API port, liveness and startup ask /healthz, the grace period
outlasts --drain-delay, the Service targets the API port of the Deployment's pods, and the
model-dir claim is the training manifests'.

plain.yaml (Indexed Jobs + headless Service): for every pod index, runs the container's
command with $(JOB_COMPLETION_INDEX) substituted and the ConfigMap's files in a temp dir:
each daemon must accept its task, and its TF_CONFIG address must be the pod's DNS name
(<job>-<index>.<subdomain>.<namespace>.svc) on the container port.

Needs python3-yaml (PSTRAIN_WITH_TEST_TOOLS=1 scripts/setup.sh). Environment:
PSTRAIN_BUILD_DIR, PSTRAIN_SOURCE_DIR (set by meson).
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("FAIL: needs the Debian package python3-yaml (PSTRAIN_WITH_TEST_TOOLS=1 scripts/setup.sh)")
    sys.exit(1)

BUILD = os.environ["PSTRAIN_BUILD_DIR"]
SOURCE = os.environ["PSTRAIN_SOURCE_DIR"]
ROLES = {"pstrain-chief": "chief", "pstrain-ps": "ps", "pstrain-worker": "worker",
         "pstrain-evaluator": "evaluator", "pstrain-serve": "serve"}
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
    return cond


def load(name):
    with open(os.path.join(SOURCE, "deploy", "kubernetes", name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def daemon_path(command):
    role = ROLES[os.path.basename(command)]
    return os.path.join(BUILD, "daemons", role, "pstrain-" + role)


def run_check(command, args, tf_config=None):
    """Runs the daemon with --check-config; returns (exit code, output)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    p = subprocess.run([daemon_path(command)] + args + ["--check-config"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return p.returncode, p.stdout.strip()


def container(template, name=None):
    containers = template["spec"]["containers"]
    if name is None:
        return containers[0]
    return next(c for c in containers if c["name"] == name)


def port_of(c, port_name):
    for p in c.get("ports", []):
        if p.get("name") == port_name:
            return p["containerPort"]
    return None


def check_scraped(what, template, c):
    """Prometheus finds the pod (deploy/prometheus: annotations) on the port its daemon serves."""
    ann = template.get("metadata", {}).get("annotations", {})
    args = c.get("args", [])
    port = args[args.index("--metrics-port") + 1] if "--metrics-port" in args else None
    check(port is not None and ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == port
          and port_of(c, "metrics") == int(port),
          "%s: annotated for Prometheus on its --metrics-port (%s, %s)" % (what, ann, port))


def rewrite_paths(args, files):
    """Replaces the ConfigMap mount paths in args by the temp files that hold them."""
    return [files.get(a, a) for a in args]


def check_tfjob(tmp):
    docs = load("tfjob.yaml")
    tfjob = next(d for d in docs if d["kind"] == "TFJob")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    job_file = os.path.join(tmp, "tfjob-job.json")
    with open(job_file, "w") as f:
        f.write(cm["data"]["job.json"])
    files = {"/etc/pstrain/job.json": job_file}
    name, ns = tfjob["metadata"]["name"], tfjob["metadata"]["namespace"]
    specs = tfjob["spec"]["tfReplicaSpecs"]
    check(set(specs) == {"Chief", "PS", "Worker", "Evaluator"}, "TFJob replica types Chief, PS, Worker, Evaluator")
    for legacy in (False, True):
        types = {("Master" if legacy and t == "Chief" else t): s for t, s in specs.items()}
        cluster = {}
        for rtype, spec in types.items():
            c = container(spec["template"], "tensorflow")
            port = port_of(c, "tfjob-port") or 2222
            rt = rtype.lower()
            cluster[rt] = ["%s-%s-%d.%s.svc:%d" % (name, rt, i, ns, port) for i in range(spec["replicas"])]
        for rtype, spec in types.items():
            check(spec.get("restartPolicy") == "ExitCode", "%s: restartPolicy ExitCode" % rtype)
            c = container(spec["template"], "tensorflow")
            check_scraped("TFJob " + rtype, spec["template"], c)
            for i in range(spec["replicas"]):
                tf = json.dumps({"cluster": cluster, "task": {"type": rtype.lower(), "index": i},
                                 "environment": "cloud"})
                rc, out = run_check(c["command"][0], rewrite_paths(c.get("args", []), files), tf)
                task = "%s:%d" % ("chief" if rtype in ("Chief", "Master") else rtype.lower(), i)
                check(rc == 0 and ("TF_CONFIG ok: " + task + " of a cluster") in out,
                      "TFJob %s %s-%d: %s accepts the operator's TF_CONFIG (%s)" % (
                          "legacy" if legacy else "", rtype, i, c["command"][0], out))
                if rtype != "Evaluator":
                    want = "address %s-%s-%d.%s.svc:2222" % (name, rtype.lower(), i, ns)
                    check(want in out, "%s-%d listens on its Service name (%s)" % (rtype, i, want))
    # The model dir: the chief's --model-dir is on a ReadWriteMany volume that the ps tasks
    # and the evaluator mount at the same path.
    chief = container(specs["Chief"]["template"], "tensorflow")
    model_dir = chief["args"][chief["args"].index("--model-dir") + 1]
    for rtype in ("Chief", "PS", "Evaluator"):
        tpl = specs[rtype]["template"]
        mounts = container(tpl, "tensorflow").get("volumeMounts", [])
        claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in tpl["spec"]["volumes"]}
        ok = any(model_dir.startswith(m["mountPath"] + "/") and claims.get(m["name"]) for m in mounts)
        check(ok, "%s mounts the shared model dir %s" % (rtype, model_dir))
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    check("ReadWriteMany" in pvc["spec"]["accessModes"], "the model-dir claim is ReadWriteMany")


def check_plain(tmp):
    docs = load("plain.yaml")
    svc = next(d for d in docs if d["kind"] == "Service")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    check(svc["spec"].get("clusterIP") == "None", "plain: the Service is headless")
    files = {}
    for key, text in cm["data"].items():
        path = os.path.join(tmp, "plain-" + key)
        with open(path, "w") as f:
            f.write(text)
        files["/etc/pstrain/" + key] = path
    jobs = [d for d in docs if d["kind"] == "Job"]
    check({ROLES[os.path.basename(container(j["spec"]["template"])["command"][0])] for j in jobs} ==
          {"chief", "ps", "worker", "evaluator"}, "plain: a Job per role")
    for job in jobs:
        spec = job["spec"]
        tpl = spec["template"]
        c = container(tpl)
        jname, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        check(spec.get("completionMode") == "Indexed", "%s: Indexed" % jname)
        check_scraped("plain " + jname, tpl, c)
        check(tpl["spec"].get("subdomain") == svc["metadata"]["name"], "%s: subdomain is the headless Service" % jname)
        check(tpl["metadata"]["labels"].items() >= svc["spec"]["selector"].items(),
              "%s: the Service selects its pods" % jname)
        rules = spec.get("podFailurePolicy", {}).get("rules", [])
        check(any(r["action"] == "FailJob" and sorted(r["onExitCodes"]["values"]) == [1, 2] for r in rules),
              "%s: exit 1 and 2 fail the Job, others are retried" % jname)
        for i in range(spec["completions"]):
            args = [a.replace("$(JOB_COMPLETION_INDEX)", str(i)) for a in c.get("args", [])]
            rc, out = run_check(c["command"][0], rewrite_paths(args, files))
            role = ROLES[os.path.basename(c["command"][0])]
            check(rc == 0 and ("TF_CONFIG ok: %s:%d of a cluster" % (role, i)) in out,
                  "plain %s-%d: %s accepts its TF_CONFIG (%s)" % (jname, i, c["command"][0], out))
            if role != "evaluator":
                want = "address %s-%d.%s.%s.svc:%d" % (jname, i, tpl["spec"]["subdomain"], ns, port_of(c, "pstrain"))
                check(want in out, "plain %s-%d: its TF_CONFIG address is its DNS name (%s)" % (jname, i, want))


def check_serve(tmp):
    docs = load("serve.yaml")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    svc = next(d for d in docs if d["kind"] == "Service")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    tpl = dep["spec"]["template"]
    c = container(tpl)
    args = c["args"]
    check(os.path.basename(c["command"][0]) == "pstrain-serve", "serve: runs pstrain-serve")
    config_path = args[args.index("--model-config-file") + 1]
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in tpl["spec"]["volumes"]}
    cm_volume = next(n for n, v in volumes.items() if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
    check(config_path == mounts[cm_volume]["mountPath"] + "/models.config" and "models.config" in cm["data"],
          "serve: --model-config-file is the ConfigMap's models.config (%s)" % config_path)
    # The config's model dirs, moved under tmp: each a model dir (job.json) for --check-config.
    text = cm["data"]["models.config"]
    root = os.path.join(tmp, "serve-models")
    names = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("name:"):
            names.append(line.split("'")[1])
        if line.startswith("base_path:"):
            path = line.split("'")[1]
            model_mount = mounts["models"]["mountPath"]
            check(path.startswith(model_mount + "/"), "serve: base_path %s is on the models volume" % path)
            local = os.path.join(root, os.path.relpath(path, "/"))
            os.makedirs(local, exist_ok=True)
            open(os.path.join(local, "job.json"), "w").close()
    local_config = os.path.join(tmp, "serve-models.config")
    with open(local_config, "w") as f:
        f.write(text.replace("'/models/", "'" + root + "/models/"))
    rc, out = run_check(c["command"][0], rewrite_paths(args, {config_path: local_config}))
    check(rc == 0 and all(("config ok: model %s: model dir" % n) in out for n in names) and names,
          "serve: pstrain-serve accepts the ConfigMap's model config (%s)" % out)
    check_scraped("serve", tpl, c)
    port = int(args[args.index("--port") + 1])
    check(port_of(c, "http") == port and args[args.index("--host") + 1] == "0.0.0.0",
          "serve: listens on 0.0.0.0 on its http container port")

    def probe_port(probe):
        p = probe["httpGet"]["port"]
        return port_of(c, p) if isinstance(p, str) else p

    ready, live, startup = c["readinessProbe"], c["livenessProbe"], c.get("startupProbe")
    check(ready["httpGet"]["path"] in ["/v1/models/" + n for n in names] and probe_port(ready) == port,
          "serve: readiness asks a served model's status on the API port (%s)" % ready["httpGet"])
    check(live["httpGet"]["path"] == "/healthz" and probe_port(live) == port, "serve: liveness asks /healthz")
    check(startup is not None and startup["httpGet"]["path"] == "/healthz" and probe_port(startup) == port,
          "serve: a startup probe on /healthz holds liveness back while models load")
    drain = float(args[args.index("--drain-delay") + 1]) if "--drain-delay" in args else 0
    grace = tpl["spec"].get("terminationGracePeriodSeconds", 30)
    check(drain > 0 and grace > drain + 10, "serve: grace period %s > --drain-delay %s + 10 s of drain" % (grace, drain))
    check(live.get("periodSeconds", 10) * live.get("failureThreshold", 3) > drain + 10,
          "serve: liveness outlasts the drain (it fails /healthz meanwhile)")
    check(not c.get("lifecycle", {}).get("preStop"), "serve: no preStop hook (SIGTERM drains)")
    check(tpl["metadata"]["labels"].items() >= svc["spec"]["selector"].items() and
          dep["spec"]["selector"]["matchLabels"].items() <= tpl["metadata"]["labels"].items(),
          "serve: the Service and the Deployment select its pods")
    target = svc["spec"]["ports"][0]["targetPort"]
    check((port_of(c, target) if isinstance(target, str) else target) == port,
          "serve: the Service targets the API port")
    claim = volumes["models"].get("persistentVolumeClaim", {})
    check(claim.get("claimName") == "pstrain-models" and mounts["models"].get("readOnly"),
          "serve: mounts the training manifests' model-dir claim read-only")
    # Not a rubber stamp: a config naming a path that is no model is refused.
    with open(local_config, "w") as f:
        f.write("model_config_list { config { name: 'x' base_path: '%s/none' } }" % root)
    rc, out = run_check(c["command"][0], rewrite_paths(args, {config_path: local_config}))
    check(rc == 2 and "neither a bundle" in out, "serve: a config naming no model is refused (%s)" % out)


def check_negative():
    """The check is not a rubber stamp: a wrong task is refused with exit 2."""
    tf = json.dumps({"cluster": {"chief": ["c-0.ns.svc:2222"], "worker": ["w-0.ns.svc:2222"]},
                     "task": {"type": "worker", "index": 0}, "environment": "cloud"})
    rc, out = run_check("pstrain-worker", [], tf)
    check(rc == 2 and "needs at least one ps task" in out, "a cluster without ps is refused (%s)" % out)
    tf = json.dumps({"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]},
                     "task": {"type": "ps", "index": 0}})
    rc, out = run_check("pstrain-worker", [], tf)
    check(rc == 2 and "this is pstrain-worker, but the task is ps:0" in out, "the wrong daemon is refused (%s)" % out)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_tfjob(tmp)
        check_plain(tmp)
        check_serve(tmp)
        check_negative()
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
