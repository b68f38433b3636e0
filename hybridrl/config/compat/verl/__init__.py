"""verl compatibility: verl's config keys (``key_list.txt``) and hybridrl's answer to each (``keys.py``)."""
