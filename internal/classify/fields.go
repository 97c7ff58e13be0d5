package classify

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

var (
	messageFields = [...]string{"role", "content"}
	partFields    = [...]string{"type", "text"}
	// mediaNames are the part types, and the keys, of image, audio, video and
	// file content parts in the OpenAI and vLLM chat formats.
	mediaNames = [...]string{"image_url", "input_image", "image", "image_embeds", "image_pil",
		"input_audio", "audio_url", "audio", "audio_embeds", "video_url", "video", "file", "input_file",
		"file_id", "file_data", "file_url"}
)

// field returns the index of key in names, or -1 when key is none of them.
// When key differs from one of names only in case (Unicode folding included,
// as Go's encoding/json matches fields), it returns that name as fold: Python
// reads field names case-sensitively, so such a key would mean different
// things to different readers, and the caller refuses it with caseError.
func field(key []byte, names []string) (idx int, fold string) {
	for i, n := range names {
		if string(key) == n {
			return i, ""
		}
	}
	ascii, upper := true, false
	for _, ch := range key {
		if ch >= utf8.RuneSelf {
			ascii = false
			break
		}
		upper = upper || 'A' <= ch && ch <= 'Z'
	}
	if ascii && !upper {
		// names are lower-case ASCII (TestFieldNamesLowerCase): an ASCII
		// key folds to one only by differing in the case of a letter.
		return -1, ""
	}
	for _, n := range names {
		if (!ascii || len(key) == len(n)) && strings.EqualFold(string(key), n) {
			return -1, n
		}
	}
	return -1, ""
}

func caseError(prefix string, key []byte, fold string) error {
	return &Error{Param: prefix + truncate(string(key), 64), Code: codeInvalidValue,
		Message: "field names are case-sensitive; did you mean " + strconv.Quote(fold) + "?"}
}
