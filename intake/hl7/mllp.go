package hl7

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// MLLP framing bytes: a frame is StartBlock, the message, EndBlock, CR.
const (
	StartBlock = 0x0B
	EndBlock   = 0x1C
	CR         = 0x0D
)

// MaxMessageBytes is the default bound on one framed message.
const MaxMessageBytes = 1 << 20

// frameReadBuffer is the read buffer of a FrameReader: with the frame
// being gathered, what one connection holds.
const frameReadBuffer = 64 << 10

// Framing errors. ErrTooLarge ends the connection: the rest of the frame
// cannot be told from the next one without reading it all.
var (
	ErrTooLarge = errors.New("hl7: message larger than the limit")
	ErrFrame    = errors.New("hl7: end block not followed by a carriage return")
)

// FrameReader reads MLLP frames from a stream. It knows framing only:
// bytes before a start block are skipped (and counted), a start block
// inside a frame restarts the frame (a sender that gave up mid-message and
// began again), and a frame longer than max is refused without buffering
// it.
type FrameReader struct {
	r       *bufio.Reader
	max     int
	buf     []byte
	Skipped int64 // bytes outside any frame, so far
}

// NewFrameReader reads frames of at most max bytes (MaxMessageBytes when
// max <= 0) from r.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = MaxMessageBytes
	}
	return &FrameReader{r: bufio.NewReaderSize(r, frameReadBuffer), max: max}
}

// Next returns the next frame's message, without its framing bytes. The
// slice is valid until the next call. A frame whose end block is not
// followed by a carriage return is returned with ErrFrame; the stream
// stays usable. At the end of the stream it returns
// io.EOF, or io.ErrUnexpectedEOF when a frame was cut short.
func (f *FrameReader) Next() ([]byte, error) {
	// Skip to a start block.
	for {
		b, err := f.r.ReadByte()
		if err != nil {
			return nil, err
		}
		if b == StartBlock {
			break
		}
		f.Skipped++
	}
	f.buf = f.buf[:0]
	for {
		chunk, err := f.r.ReadSlice(EndBlock)
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		end := err == nil
		if end {
			chunk = chunk[:len(chunk)-1]
		}
		// A start block inside a frame begins a new frame.
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] == StartBlock {
				f.Skipped += int64(len(f.buf) + i + 1)
				f.buf = f.buf[:0]
				chunk = chunk[i+1:]
				break
			}
		}
		if len(f.buf)+len(chunk) > f.max {
			return nil, fmt.Errorf("%w of %d bytes", ErrTooLarge, f.max)
		}
		f.grow(len(chunk))
		f.buf = append(f.buf, chunk...)
		if !end {
			continue
		}
		b, err := f.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if b != CR {
			f.r.UnreadByte() // it may start the next frame
			return f.buf, ErrFrame
		}
		return f.buf, nil
	}
}

// grow makes room for n more bytes in the frame buffer, doubling it (up
// to the bound) rather than letting append grow it by a quarter at a
// time: a frame of the largest size then costs twice its size in
// buffers, not five times.
func (f *FrameReader) grow(n int) {
	need := len(f.buf) + n
	if need <= cap(f.buf) {
		return
	}
	b := make([]byte, len(f.buf), min(max(2*cap(f.buf), need), f.max))
	copy(b, f.buf)
	f.buf = b
}

// AppendFrame appends msg framed for MLLP to dst.
func AppendFrame(dst, msg []byte) []byte {
	dst = append(dst, StartBlock)
	dst = append(dst, msg...)
	return append(dst, EndBlock, CR)
}
