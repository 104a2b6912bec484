"""SPADE (this hour) against the chance hour's fixed pool, on the same probe pairs:
    python bin/benchmarks/results/learning-60-lr25/spade_vs_fixed.py bin/benchmarks/results/learning-60-lr25 bin/benchmarks/results/learning-60-chance
(from the repository root, in .venv). Both probes must be on the same environments with the same initial model."""
import json, sys
from actors.evaluation.paired import compare, comparison_markdown
new, old = sys.argv[1], sys.argv[2]
jn, jo = json.load(open(f"{new}/learning.json")), json.load(open(f"{old}/learning.json"))
assert jn["probe_envs_sha256"] == jo["probe_envs_sha256"], "different probe envs"
assert jn["initial_model_sha256"] == jo["initial_model_sha256"], "different initial models"
rows_new = [json.loads(l) for l in open(f"{new}/probe/results.jsonl")]
rows_old = [json.loads(l) for l in open(f"{old}/probe/results.jsonl")]
suite_new = rows_new[0]["suite"]; suite_old = rows_old[0]["suite"]
ids_old = {m["label"]: m["model"] for m in jo["models"]}
ids_new = {m["label"]: m["model"] for m in jn["models"]}
fixed_rows = [dict(r, suite=suite_new) for r in rows_old if r["model"] == ids_old["fixed"] and r["suite"] == suite_old]
rows = rows_new + fixed_rows
models = [(ids_new[l], l) for l in ("initial", "SPADE", "copy-bot", "random")] + [(ids_old["fixed"], "fixed")]
c = compare(rows, suite_new, models, [("SPADE", "initial"), ("SPADE", "fixed"), ("SPADE", "copy-bot"), ("SPADE", "random"), ("fixed", "initial")])
print(comparison_markdown(c))
print(json.dumps({d["a"] + "-" + d["b"]: [round(100*d["difference"],1), round(100*d["low"],1), round(100*d["high"],1)] for d in c["differences"]}))
