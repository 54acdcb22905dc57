"""The jobs: one pipeline per source dialect behind one interface (``base.Pipeline``), what they share
(``base``, ``streaming``, ``status``), and the dispatch that picks the dialect from the configuration
(``dispatch``). No dialect's module imports another's or the dispatch."""
