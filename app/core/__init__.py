"""The lowest layer: the clock, ids and the JSON codec.

Leaves on the standard library (and orjson) that the database layer and the kit both stand on,
so neither has to import the other to read the time, make an id or encode JSON.
"""
