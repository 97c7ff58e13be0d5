package classify

import "strconv"

// Codes of Error.
const (
	codeInvalidJSON  = "invalid_json"
	codeInvalidType  = "invalid_type"
	codeInvalidValue = "invalid_value"
	codeMissing      = "missing_required_parameter"
)

// Error is a body that gatekeeper refuses with 400 before it reaches a pod.
type Error struct {
	// Param is the path of the offending field ("messages[2].content"),
	// "" when the body as a whole is at fault.
	Param string
	// Message says what is wrong, for the client.
	Message string
	// Code is the OpenAI-style error code: "invalid_json", "invalid_type",
	// "invalid_value" or "missing_required_parameter".
	Code string
}

func (e *Error) Error() string {
	return "classify: " + e.ClientMessage()
}

// ClientMessage is the message for the OpenAI-style error body: Message,
// prefixed with Param when there is one.
func (e *Error) ClientMessage() string {
	if e.Param == "" {
		return e.Message
	}
	return e.Param + ": " + e.Message
}

func indexed(name string, i int) string { return name + "[" + strconv.Itoa(i) + "]" }
