package testbed

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParsePair parses "pair", optionally followed by comma-separated options
// mtu=N (the veth MTU) and queues=N (RX and TX queues of each end):
// "pair,mtu=9000,queues=2". Errors wrap ErrConfig.
func ParsePair(s string) (PairConfig, error) {
	var c PairConfig
	parts := strings.Split(s, ",")
	if parts[0] != "pair" {
		return c, fmt.Errorf("%w: %q: want pair[,mtu=N][,queues=N]", ErrConfig, s)
	}
	for _, opt := range parts[1:] {
		k, v, ok := strings.Cut(opt, "=")
		n, err := strconv.Atoi(v)
		switch {
		case !ok || v == "" || err != nil || v[0] < '0' || v[0] > '9':
			err = errors.New("want key=number")
		case k == "mtu":
			c.MTU = n
			if n < 68 || n > 65535 {
				err = errors.New("MTU must be 68 to 65535")
			}
		case k == "queues":
			c.Queues = n
			if n < 1 || n > MaxQueues {
				err = fmt.Errorf("queues must be 1 to %d", MaxQueues)
			}
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return c, fmt.Errorf("%w: %q: option %q: %v", ErrConfig, s, opt, err)
		}
	}
	return c, nil
}

// String returns the config in ParsePair's syntax, with the options that
// are set.
func (c PairConfig) String() string {
	s := "pair"
	if c.MTU != 0 {
		s += fmt.Sprintf(",mtu=%d", c.MTU)
	}
	if c.Queues != 0 {
		s += fmt.Sprintf(",queues=%d", c.Queues)
	}
	return s
}
