#!/usr/bin/env bash
# A real Label Studio for the label-studio label source's tests and for trying it locally.
#   bash deploy/label-studio/setup.sh [VENV_DIR]
# creates VENV_DIR (default .venv-label-studio) with label-studio in an environment of its own:
# it pins Django, pandas and numpy versions certsel's environment must not have to share.
# Nothing is downloaded but packages from the registry (about 1 GB, 1.5 min here).
set -euo pipefail
VENV=${1:-.venv-label-studio}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet "label-studio==1.23.2"
echo "ready: $VENV (label-studio $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("label-studio"))'))"
