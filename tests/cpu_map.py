"""Where the suite's CPU goes: `CONVBERT_TEST_CPU_LOG=/tmp/cpu.jsonl bash scripts/test.sh`, then
`python -m tests.cpu_map /tmp/cpu.jsonl`. Per test file: the CPU seconds of the pytest worker
itself, of the subprocesses it waited for (bash scripts, fresh interpreters) and of the zygote
forks its tests started (tests/zygote.py), and the summed wall time; then per program the
forks ran (a script, a module or -c). On 2 cores a pass takes at least its CPU seconds / 2."""
import collections
import json
import sys


def main(argv):
    if len(argv) != 1:
        print("usage: python -m tests.cpu_map LOG", file=sys.stderr)
        return 2
    files = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])   # self, children, forks, wall
    programs = collections.defaultdict(lambda: [0, 0.0])
    with open(argv[0], encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            where = files[row["test"].split("::")[0]]
            if row["kind"] == "test":
                where[0] += row["self"]
                where[1] += max(0.0, row["children"])
                where[3] += row["wall"]
            else:
                where[2] += row["cpu"]
                program = programs[row["program"].rsplit("/", 1)[-1]]
                program[0] += 1
                program[1] += row["cpu"]
    print(f"{'CPU s':>7} {'self':>6} {'waited':>6} {'forks':>6} {'wall s':>7}  test file")
    for name, (own, waited, forks, wall) in sorted(files.items(),
                                                   key=lambda kv: -sum(kv[1][:3])):
        print(f"{own + waited + forks:7.1f} {own:6.1f} {waited:6.1f} {forks:6.1f} {wall:7.1f}  "
              f"{name}")
    total = [sum(v[i] for v in files.values()) for i in range(4)]
    print(f"{sum(total[:3]):7.1f} {total[0]:6.1f} {total[1]:6.1f} {total[2]:6.1f} {total[3]:7.1f}  "
          "all (zygote start-ups and collection not included)")
    print(f"\n{'CPU s':>7} {'forks':>5}  program (zygote forks)")
    for name, (count, seconds) in sorted(programs.items(), key=lambda kv: -kv[1][1]):
        print(f"{seconds:7.1f} {count:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
