"""Widgets render what they are given and post messages named as past events; they do no I/O."""
