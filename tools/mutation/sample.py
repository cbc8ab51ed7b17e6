"""Keep a seeded sample of a cosmic-ray session's pending mutants (drop the rest).

    python tools/mutation/sample.py SESSION.sqlite N

Each mutant's rank is ``zlib.crc32`` of its file, operator, occurrence and
position, so the same N mutants are kept on every machine; mutants that already
have a result are always kept.
"""

from __future__ import annotations

import sqlite3
import sys
import zlib


def main(session: str, n: int) -> None:
    db = sqlite3.connect(session)
    done = {r[0] for r in db.execute("SELECT job_id FROM work_results")}
    specs = db.execute(
        "SELECT job_id, module_path, operator_name, occurrence, start_pos_row, start_pos_col"
        " FROM mutation_specs"
    ).fetchall()
    pending = sorted(
        (s for s in specs if s[0] not in done),
        key=lambda s: zlib.crc32(repr(s[1:]).encode()),
    )
    drop = [(s[0],) for s in pending[max(0, n - len(done)) :]]
    db.executemany("DELETE FROM mutation_specs WHERE job_id = ?", drop)
    db.executemany("DELETE FROM work_items WHERE job_id = ?", drop)
    db.commit()
    print(f"{len(specs)} mutants, {len(specs) - len(drop)} kept ({len(done)} already run)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
