package transport

// DataPayload returns the payload of every full data packet that a QP of
// cfg sends over IPv4: the MTU less the largest header stack its profile
// can send, rounded as the profile rounds it (to 64 bytes for Spray, to
// a power of two for classic RoCE). Simulators use it to count the frames
// of a message (TestDataPayload).
func DataPayload(cfg Config) int { return payloadSize(&cfg, false) }
