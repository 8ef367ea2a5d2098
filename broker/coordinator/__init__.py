"""The group coordinator: consumer groups, their offsets and the __consumer_offsets records."""
