package rss

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

const (
	siocEthtool  = 0x8946
	ethtoolGRSSH = 0x46
	rxfhHdrLen   = 24 // struct ethtool_rxfh up to rss_config
)

// Device returns the RSS hash key and indirection table of the network
// device named ifname, read with the ETHTOOL_GRSSH ioctl in the calling
// thread's network namespace. A device without RSS (loopback, veth) gives
// an error wrapping ErrNoRSS.
func Device(ifname string) (Table, error) {
	if len(ifname) == 0 || len(ifname) >= 16 {
		return Table{}, fmt.Errorf("rss: bad interface name %q", ifname)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return Table{}, fmt.Errorf("rss: socket: %w", err)
	}
	defer syscall.Close(fd)
	return DeviceFD(fd, ifname)
}

// DeviceFD is Device through fd, a socket of the caller's (any family),
// whose network namespace is the one where ifname is looked up: a link
// opened in another namespace keeps one to read its device later from any
// thread.
func DeviceFD(fd int, ifname string) (Table, error) {
	if len(ifname) == 0 || len(ifname) >= 16 {
		return Table{}, fmt.Errorf("rss: bad interface name %q", ifname)
	}
	// First ask for the sizes, then for the table and key.
	hdr := make([]byte, rxfhHdrLen)
	binary.NativeEndian.PutUint32(hdr, ethtoolGRSSH)
	if err := ethtool(fd, ifname, hdr); err != nil {
		return Table{}, err
	}
	indir := binary.NativeEndian.Uint32(hdr[8:])
	keyLen := binary.NativeEndian.Uint32(hdr[12:])
	if indir == 0 || keyLen == 0 {
		return Table{}, fmt.Errorf("%w: %s reports a %d-entry table and a %d-byte key", ErrNoRSS, ifname, indir, keyLen)
	}
	if indir > 1<<16 || keyLen > 1<<10 {
		return Table{}, fmt.Errorf("rss: %s reports a %d-entry table and a %d-byte key", ifname, indir, keyLen)
	}
	buf := make([]byte, rxfhHdrLen+4*int(indir)+int(keyLen))
	copy(buf, hdr)
	if err := ethtool(fd, ifname, buf); err != nil {
		return Table{}, err
	}
	t := Table{Indir: make([]uint32, indir), Key: make([]byte, keyLen)}
	for i := range t.Indir {
		t.Indir[i] = binary.NativeEndian.Uint32(buf[rxfhHdrLen+4*i:])
	}
	copy(t.Key, buf[rxfhHdrLen+4*int(indir):])
	return t, nil
}

// ethtool runs SIOCETHTOOL on ifname with data as the command buffer.
func ethtool(fd int, ifname string, data []byte) error {
	var ifr [40]byte // struct ifreq: name, then a pointer in the union
	copy(ifr[:16], ifname)
	*(*uintptr)(unsafe.Pointer(&ifr[16])) = uintptr(unsafe.Pointer(&data[0]))
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), siocEthtool, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		if errors.Is(errno, syscall.EOPNOTSUPP) {
			return fmt.Errorf("%w: %s: %w", ErrNoRSS, ifname, errno)
		}
		return fmt.Errorf("rss: ETHTOOL_GRSSH on %s: %w", ifname, errno)
	}
	return nil
}
