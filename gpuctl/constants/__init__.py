"""Every label key, object name and magic string gpuctl uses, in one place.

Other modules import from here instead of spelling strings (`from gpuctl.constants import X`): a renamed
label is a one-line change, and `grep` finds every user of a key. The names live in one module per concern
below; this package is the one place to import them from.
"""

from gpuctl.constants.audit import *  # noqa: F403
from gpuctl.constants.gang import *  # noqa: F403
from gpuctl.constants.kinds import *  # noqa: F403
from gpuctl.constants.kueue import *  # noqa: F403
from gpuctl.constants.labels import *  # noqa: F403
from gpuctl.constants.multicluster import *  # noqa: F403
from gpuctl.constants.queueing import *  # noqa: F403
from gpuctl.constants.security import *  # noqa: F403
from gpuctl.constants.serving import *  # noqa: F403
from gpuctl.constants.sharing import *  # noqa: F403
from gpuctl.constants.utilisation import *  # noqa: F403
