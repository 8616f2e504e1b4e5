"""The parties' sessions: handshake, keepalive and remote cuts, shared by training, prediction and serving."""
