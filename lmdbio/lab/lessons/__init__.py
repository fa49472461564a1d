"""What the notebooks teach with: prose checked against the results, the settings in one call.

=================  ============================================================
module             what it does
=================  ============================================================
prose              every measured number or comparison word in a notebook's
                   text is backed by a fact computed from the results
nbNN               notebook NN's facts (``FACTS``) and sourced constants (``STATIC``)
settings           ``measure_settings`` / ``show_settings``: a claim in every setting
=================  ============================================================
"""

from .prose import check_notebook, compare, facts

__all__ = ["check_notebook", "compare", "facts"]
