"""Stand-in for the pip bootstrap script ansible-test downloads (ci-files.testing.ansible.com).

Machines that reach PyPI but not that host run ansible-test sanity with this in its cache:
ensurepip, then the pip it asks for, from PyPI, trusting the system's CA bundle.
"""

import ensurepip
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install", "--cert", "/etc/ssl/certs/ca-certificates.crt", *args])
