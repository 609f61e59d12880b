"""Imported once by the stage workers' fork server, so each stage process starts with numpy and
torch already loaded (saves a few seconds of imports per stage). Nothing else happens here: no
threads are started before the fork."""

import numpy  # noqa: F401
import torch  # noqa: F401
