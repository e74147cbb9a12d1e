"""Layer 4: what a notebook calls, and the study files it reads.

``notebook`` holds the helpers the notebooks call (validate their parameters, train, show and
summarise a run); ``studyfile`` parses params/*.yaml into runs, and ``executor`` types a study
file's ``executor:`` section. Running and publishing studies is ``dtype_bench``'s, which
imports this package; nothing here imports it. Imports every layer below, and ``analysis``.
"""
