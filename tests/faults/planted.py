"""What a hostile ``config.json`` names for a resume to import (``tests.faults.planted:CartPole-v1``
as its env, ``tests.faults.planted:Builder`` as its agent): importing this module stands for the
harm (tests check that it never enters ``sys.modules``)."""


class Builder:
    """Not an agent builder: only its import path matters."""
