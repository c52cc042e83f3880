"""``chainermn-rt doctor [--image] [--json]``: one line per check, exit 1 on any FAIL.

Example::

    $ chainermn-rt doctor --image
    ok    flavor         cpu (from /opt/chainermn_rt/VERSIONS)
    ok    mpi            Open MPI 4.1.4 (/usr/bin/ompi_info)
    n/a   mpi-cuda       cpu flavour (mpi_built_with_cuda_support=false)
    ...
"""

from __future__ import annotations

import json


def configure(parser) -> None:
    parser.add_argument("--image", action="store_true",
                        help="also compare with the image's /opt/chainermn_rt/VERSIONS")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def run(args) -> int:
    from chainermn_rt import doctor

    checks = doctor.run_checks(image=args.image)
    if args.json:
        print(json.dumps(doctor.as_json(checks), indent=2))
    else:
        for check in checks:
            print(doctor.format_line(check))
    return 1 if any(c.status == doctor.FAIL for c in checks) else 0
