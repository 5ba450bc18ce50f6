"""The face pipeline on the device: detect -> align -> embed -> match a gallery."""
