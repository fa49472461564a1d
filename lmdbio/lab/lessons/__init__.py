"""What the notebooks teach with: prose checked against the results, the settings in one call.

=================  ============================================================
module             what it does
=================  ============================================================
prose              every measured number or comparison word in a notebook's
                   text is backed by a fact computed from the results
wording            the words the checks look for (numbers, comparisons) and Problem
figtext            the figures' typed text (titles, labels, legends) and the
                   claims' names: every number or comparison has a source
nbNN               notebook NN's facts (``FACTS``) and sourced constants (``STATIC``)
settings           ``measure_settings`` / ``show_settings``: a claim in every setting
=================  ============================================================
"""

from .prose import check_notebook, compare, facts

__all__ = ["check_notebook", "compare", "facts"]
